"""The LLM stages of params/llm-cpu.yaml replayed from a real model's recorded answers (no model).

The cassette ``tests/fixtures/real_llm/llm-cpu.jsonl`` holds every request and raw answer of one
``saber run all --params params/llm-cpu.yaml`` with Qwen2.5-Coder-1.5B-Instruct on a CPU, and
``inputs/`` what those stages read and wrote (``saber_lib.studies.llm_stages.export_inputs``).
Replaying the stages' LLM work through ``llm.backend: replay`` must give exactly what the run
wrote: a change to a prompt, a parser, the prefill, guided JSON, the log-probability reading or the
tournament that alters a request or the reading of a recorded answer fails here (an unrecorded
request raises, naming its template and key).
"""
import json
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from saber_lib.core import config
from saber_lib import llm as L
from saber_lib.studies import llm_stages
from saber_lib.validation import real_llm as R
from saber_lib.ontology.tree import ontology_from_nodes
from saber_lib.summaries.summarize import summarize_llm
from saber_lib.core.text import clip_words
from saber_lib.topics import LLMTopicScorer
from saber_lib.topics.llm_sample import llm_walk

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures" / "real_llm"
CASSETTE = FIX / "llm-cpu.jsonl"


def replay_params(cassette=CASSETTE):
    prof = config.load_profile(ROOT / "params" / "llm-cpu.yaml",
                               {"llm.backend": "replay", "llm.cassette": str(cassette)})
    return llm_stages.stage_params(prof)


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    params = replay_params()
    backend = L.make_backend(params["llm"], None, progress=False)
    out = llm_stages.run_llm_stages(llm_stages.load_llm_inputs(FIX / "inputs"), params, backend,
                                    tmp_path_factory.mktemp("replay"))
    return out, backend


def test_cassette_is_small_and_from_the_pinned_model():
    entries = L.load_cassette(CASSETTE)
    assert sum(p.stat().st_size for p in FIX.rglob("*") if p.is_file()) <= 10 * 2 ** 20
    assert {e["model_sha256"] for e in entries} == {"cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"}
    assert {e["backend"] for e in entries} == {"llamacpp"}
    assert {"topic_scoring", "solution_summary", "pairwise_judge_logprob", "latex_format",
            "ordinal_judge_score"} <= {e["template"] for e in entries}


def test_replayed_stages_give_what_the_run_wrote(replayed):
    out, backend = replayed
    inputs = llm_stages.load_llm_inputs(FIX / "inputs")
    keep = ["doc_id", "urls", "domains", "failed"]
    assert_frame_equal(out["topics"].select(keep), inputs["topics_sample"].select(keep))
    cols = ["doc_id", "no_core_idea", "core_idea", "keywords", "confidence", "failed"]
    assert_frame_equal(out["summaries"].select(cols), inputs["summaries_sample"].select(cols))
    jcols = ["query_id", "round", "a", "b", "outcome", "judge"]
    assert_frame_equal(out["judgments"].select(jcols), inputs["judgments"].select(jcols))
    rcols = ["query_id", "cand_id", "theta", "rating", "wins", "n_judged"]
    assert_frame_equal(out["ratings"].select(rcols).sort("query_id", "cand_id"),
                       inputs["ratings"].select(rcols).sort("query_id", "cand_id"))
    scols = ["query_id", "math_text", "words_text"]
    assert_frame_equal(out["mvw_split"].select(scols), inputs["mvw_split"].select(scols))
    labels = inputs["jv_labels"]
    for method, got in out["jv_labels"].items():
        if method in labels.columns:
            assert got == labels[method].to_list(), method
    # every request came from the cassette, none from a model
    u = backend.usage()
    assert u["calls"] + u["failed"] > 0 and u["cached"] == 0


def test_parse_failures_per_template_as_recorded():
    """What the template parsers make of the real answers, pinned: a parser change that rejects a
    recorded answer (or starts accepting a bad one) shows up here. Every recorded answer parses (the
    LaTeX rewrite of the chess-board query once answered "find the number of ways" in place of
    copying it; the prompt now says the problem's questions are for its reader, the answer is
    prefilled with the text's opening plain words and figure code is not sent). The topic answers
    name their best label before the scores; when guided decoding wrote the scores first, four
    problems in five got 0.0 for every label, which the parser now rejects (no label at 1.0)."""
    table = R.template_table(L.load_cassette(CASSETTE))
    got = {t: (n, bad) for t, n, bad in table.select("template", "requests", "parse_failures").iter_rows()}
    assert got == {"latex_format": (5, 0), "ordinal_judge_score": (4, 0), "pairwise_judge_logprob": (26, 0),
                   "solution_summary": (10, 0), "topic_scoring": (5, 0)}
    assert table["call_errors"].sum() == 0 and table["retries"].sum() == 0


def test_judge_read_from_real_log_probabilities():
    orders = R.judge_orders(L.load_cassette(CASSETTE))
    s = R.judge_summary(orders)
    assert s["pairs"] >= 2 * 4  # >= 2 queries with several Swiss pairs, each in both orders
    assert 0.0 <= s["order_agreement"] <= 1.0 and 0.0 <= s["first_share"] <= 1.0


def test_failure_budget_stops_on_spoiled_real_answers(tmp_path):
    """The same real answers, each summary's text cut in half: nothing parses, and the stage's
    failure budget stops it (as a prompt/parser mismatch would on a real run). The profile asks no
    retries (temperature 0 would give the same answer), so the cassette answers every request."""
    spoiled = tmp_path / "spoiled.jsonl"
    with open(CASSETTE) as src, open(spoiled, "w") as dst:
        for line in src:
            e = json.loads(line)
            if e["template"] == "solution_summary":
                e["text"] = e["text"][: len(e["text"]) // 2]
            dst.write(json.dumps(e) + "\n")
    params = replay_params(spoiled)
    backend = L.make_backend(params["llm"], None, progress=False)
    inputs = llm_stages.load_llm_inputs(FIX / "inputs")
    sample = inputs["summaries_sample"].select("doc_id").join(inputs["corpus"], on="doc_id", how="left")
    clip = params["llm"]["text_max_words"]
    rows, _ = summarize_llm(backend, sample["doc_id"].to_list(), [clip_words(p, clip) for p in sample["problem"]],
                            [clip_words(s, clip) for s in sample["solution"]], max_words=params["core_idea_max_words"],
                            retries=params["summary_retries"], guided=True)
    assert all(r["failed"] for r in rows)
    with pytest.raises(L.FailureBudgetExceeded):
        L.check_failure_budget(n_calls=len(rows), n_failed=sum(r["failed"] for r in rows), first_reasons=[],
                               stage="summaries", max_rate=params["llm"]["max_failure_rate"])


def test_real_topic_answers_name_a_best_label_at_one_and_all_zero_ones_fail(tmp_path):
    """Every recorded topic answer gives its named best label 1.0, so each problem gets a domain; the
    same answers with every score set to 0.0 (what the model wrote when the schema asked for the
    scores first) are parse failures: no domain, the visit failed with the reason."""
    entries = [e for e in L.load_cassette(CASSETTE) if e["template"] == "topic_scoring"]
    for e in entries:
        ans = json.loads(e["text"])
        assert ans["scores"][ans["best_label"]] == 1.0
    inputs = llm_stages.load_llm_inputs(FIX / "inputs")
    assert all(inputs["topics_sample"]["domains"].list.len() >= 1)
    spoiled = tmp_path / "zeros.jsonl"
    with open(CASSETTE) as src, open(spoiled, "w") as dst:
        for line in src:
            e = json.loads(line)
            if e["template"] == "topic_scoring":
                ans = json.loads(e["text"])
                e["text"] = json.dumps({**ans, "scores": {k: 0.0 for k in ans["scores"]}})
            dst.write(json.dumps(e) + "\n")
    params = replay_params(spoiled)
    scorer = LLMTopicScorer(L.make_backend(params["llm"], None, progress=False), retries=params["topic_retries"],
                            guided=True)
    sample = inputs["topics_sample"].select("doc_id").join(inputs["corpus"], on="doc_id", how="left")
    topics, result = llm_walk(ontology_from_nodes(inputs["ontology"]), sample, scorer,
                              clip=params["llm"]["text_max_words"], tau=params["tau"],
                              score_root=params["topic_score_root"], max_depth=params["topic_llm_max_depth"])
    assert topics["failed"].to_list() == [True] * 5 and topics["domains"].list.len().sum() == 0
    assert all("every one of the 11 labels scored 0.0" in reason for _, _, reason in result.failures)
    table = R.template_table(L.load_cassette(spoiled))
    assert table.filter(pl.col("template") == "topic_scoring")["parse_failures"].item() == 5


def test_unrecorded_request_names_template_and_key(tmp_path):
    params = replay_params()
    backend = L.make_backend(params["llm"], None, progress=False)
    inputs = llm_stages.load_llm_inputs(FIX / "inputs")
    changed = dict(params, llm={**params["llm"], "text_max_words": params["llm"]["text_max_words"] + 1})
    with pytest.raises(L.LLMError, match=r"topic_scoring request with key [0-9a-f]{64}"):
        llm_stages.run_llm_stages(inputs, changed, backend, tmp_path / "w")
