"""The section on what a real model did (saber_lib.validation.real_llm) on a tiny hand-made cassette."""
import json
import math

import polars as pl
import pytest

from saber_lib.validation import real_llm as R


def lp_entry(q, first, second, l1, l2, latency, attempt=0, pt=100):
    return {"key": f"{q}{first}{second}{attempt}", "template": "pairwise_judge_logprob",
            "meta": {"template": "pairwise_judge_logprob", "query": q, "first": first, "second": second},
            "logprobs_for": ["1", "2"], "logprobs": {"1": l1, "2": l2}, "text": "\\boxed{", "attempt": attempt,
            "latency_s": latency, "prompt_tokens": pt, "completion_tokens": 1, "error": None}


SUMMARY_OK = json.dumps({"noCoreIdea": False, "coreIdea": "Pair each term with its mirror image.",
                         "supportingIdeas": [], "keywords": ["pairing"], "confidence": 0.8})
SUMMARY_NONE = json.dumps({"noCoreIdea": True, "coreIdea": None, "supportingIdeas": [], "keywords": [],
                           "confidence": 0.3})


def summ_entry(text, attempt, latency, pt, ct, error=None):
    return {"key": f"s{attempt}{latency}", "template": "solution_summary",
            "meta": {"template": "solution_summary", "max_words": 30}, "logprobs_for": None, "text": text,
            "attempt": attempt, "latency_s": latency, "prompt_tokens": pt, "completion_tokens": ct, "error": error}


ENTRIES = [
    # pair (q1: x, y): both orders prefer x -> consistent, verdict a; first-chosen in ab only
    lp_entry("q1", "x", "y", -0.1, -2.0, 2.0),
    lp_entry("q1", "y", "x", -3.0, -0.5, 4.0),
    # pair (q1: z, w): both orders say "1" -> inconsistent (position bias); margins 1.0 and 0.5 -> a
    lp_entry("q1", "z", "w", -0.5, -1.5, 6.0),
    lp_entry("q1", "w", "z", -0.6, -1.1, 8.0),
    # a majority vote of the first pair: not a second pair, not a retry
    lp_entry("q1", "x", "y", -0.1, -2.0, 10.0, attempt=1000),
    # summaries: parsed, no core idea, unparseable first try and its retry that parses, a call error
    summ_entry(SUMMARY_OK, 0, 1.0, 300, 40),
    summ_entry(SUMMARY_NONE, 0, 3.0, 310, 30),
    summ_entry("I think the idea is pairing", 0, 5.0, 320, 8),
    summ_entry(SUMMARY_OK, 1, 7.0, 330, 40),
    summ_entry("", 0, 0.5, 0, 0, error="engine said no"),
]


def test_template_table_counts_by_hand():
    t = {r["template"]: r for r in R.template_table(ENTRIES).iter_rows(named=True)}
    lp = t["pairwise_judge_logprob"]
    assert (lp["requests"], lp["call_errors"], lp["parse_failures"], lp["retries"]) == (5, 0, 0, 0)
    assert lp["mean_s"] == pytest.approx(6.0) and lp["p95_s"] == pytest.approx(9.6)  # 8 + 0.8 * (10 - 8)
    s = t["solution_summary"]
    assert (s["requests"], s["call_errors"], s["parse_failures"], s["retries"]) == (5, 1, 1, 1)
    assert s["parse_failure_rate"] == pytest.approx(0.2)
    assert s["prompt_tokens"] == pytest.approx((300 + 310 + 320 + 330) / 5)
    assert s["answer_tokens"] == pytest.approx((40 + 30 + 8 + 40) / 5)


def test_judge_orders_and_summary_by_hand():
    o = R.judge_orders(ENTRIES)
    assert o.select("query_id", "a", "b", "consistent", "verdict").rows() == [
        ("q1", "x", "y", True, "a"), ("q1", "z", "w", False, "a")]
    assert o["margin_ab"].to_list() == pytest.approx([1.9, 1.0])
    s = R.judge_summary(o)
    # single-order verdicts: ab x->first, ba y-vs-x -> second, z->first, w->first: 3 of 4 first
    assert s == {"pairs": 2, "order_agreement": 0.5, "first_share": 0.75, "tie_share": 0.0}


class FixedJudge:
    def __init__(self, answers):
        self.answers = answers

    def judge_pairs(self, items):
        return [self.answers[(q, a, b)] for q, a, b in items]


def test_judge_agreement_with_other_judges():
    o = R.judge_orders(ENTRIES)
    docs = {k: k for k in ("q1", "x", "y", "z", "w")}
    t = R.judge_agreement(o, docs, {"same": FixedJudge({("q1", "x", "y"): 1, ("q1", "z", "w"): 1}),
                                    "half": FixedJudge({("q1", "x", "y"): 2, ("q1", "z", "w"): 1}),
                                    "ties": FixedJudge({("q1", "x", "y"): 0, ("q1", "z", "w"): 0})})
    rows = {r["judge"]: (r["pairs"], r["agree"]) for r in t.iter_rows(named=True)}
    assert rows["same"] == (2, 1.0) and rows["half"] == (2, 0.5)
    assert rows["ties"][0] == 0 and math.isnan(rows["ties"][1])


def test_summary_answers_by_hand():
    s = R.summary_answers(ENTRIES)
    # first attempts: OK, NONE, unparseable, error -> 4 answers, 2 parse, 1 of them without core idea
    assert s["answers"] == 4 and s["parsed_share"] == 0.5 and s["no_core_idea_share"] == 0.5
    assert s["core_words_mean"] == 7.0 and s["core_words_max"] == 7


def test_rating_by_group_on_shared_rows():
    a = pl.DataFrame({"query_id": ["q"] * 3, "cand_id": ["x", "y", "z"], "group": ["both", "both", "topic-only"],
                      "rating": [5.0, 3.0, 1.0]})
    b = pl.DataFrame({"query_id": ["q"] * 2, "cand_id": ["x", "z"], "rating": [2.0, 4.0]})
    t = R.rating_by_group(a, b)
    assert t.rows() == [("both", 1, 5.0, 2.0), ("topic-only", 1, 1.0, 4.0)]


def test_section_captions_name_model_backend_and_clipping():
    class Backend:
        def __init__(self, name):
            self.name = name

        def describe(self):
            return {"llm_recorded_backend": "llama-cpp"}

    caps = R.section_captions({"model": "m1", "text_max_words": 0}, Backend("vllm"), "swiss", 4)
    assert set(caps) == {"templates", "judge", "judge_agreement", "summaries", "rating_by_group"}
    assert all(c.endswith("; model m1 via vllm.") for c in caps.values())
    assert "(swiss, 4 rounds)" in caps["rating_by_group"]
    replay = R.section_captions({"model": "m1", "text_max_words": 30}, Backend("replay"), "swiss", 4)["judge"]
    assert "via replay (recorded by llama-cpp); " in replay and "clipped to 30 words" in replay


@pytest.mark.parametrize("nomic_installed", [True, False])
def test_stage_section_compares_with_use_and_nomic(monkeypatch, tmp_path, nomic_installed):
    """The stage's section asks both proxy judges for the judged pairs; a workbench without the nomic
    GGUF compares with USE alone and the caption says why."""
    from types import SimpleNamespace

    from saber_lib.embed import EncoderUnavailable

    use = FixedJudge({("q1", "x", "y"): 1, ("q1", "z", "w"): 1})     # agrees on both pairs
    nomic = FixedJudge({("q1", "x", "y"): 2, ("q1", "z", "w"): 2})   # disagrees on both
    asked = []

    def build_judge(name, ctx):
        if name == "proxy:use-m":
            return use
        asked.append(name)
        if not nomic_installed:
            raise EncoderUnavailable("encoder 'nomic-embed' needs its GGUF")
        return nomic

    monkeypatch.setattr(R, "build_judge", build_judge)
    monkeypatch.setattr(R, "corpus_docs", lambda corpus, ids: {k: k for k in ids})
    ratings = pl.DataFrame({"query_id": ["q1"], "cand_id": ["x"], "group": ["both"], "rating": [1.0]})
    monkeypatch.setattr(R, "run_tournament", lambda *a, **k: SimpleNamespace(ratings=ratings))
    bench = pl.DataFrame({"query_id": ["q1"] * 4, "cand_id": ["x", "y", "z", "w"]})
    params = {"llm": {"model": "m1", "text_max_words": 30}, "schedule": "swiss", "rounds": 2, "seed": 0,
              "bt_alpha": 0.1, "rating_top": 10}
    backend = SimpleNamespace(name="llamacpp")
    sec = R.real_llm_section(ENTRIES, None, bench, ratings, params=params, backend=backend, judge_ctx=None,
                          store_dir=tmp_path)
    rows = {r["judge"]: (r["pairs"], r["agree"]) for r in sec["tables"]["judge_agreement"].iter_rows(named=True)}
    assert asked == ["proxy:nomic-embed"]
    caption = sec["captions"]["judge_agreement"]
    if nomic_installed:
        assert rows == {"proxy:use-m": (2, 1.0), "proxy:nomic-embed": (2, 0.0)}
        assert "first 2,048 tokens" in caption and "not compared" not in caption
    else:
        assert rows == {"proxy:use-m": (2, 1.0)}
        assert "proxy:nomic-embed not compared: encoder 'nomic-embed' needs its GGUF" in caption
