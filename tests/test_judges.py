"""Judges: LLM adapters on scripted backends, position swap, majority, ordinal, proxy, simulated."""
import re

import numpy as np
import pytest

from saber_lib.judging import judges
from saber_lib.judging.registry import JudgeSettings
from saber_lib.judging.spec_judges import judge_from_profile
from saber_lib.llm.cache import ResponseCache
from saber_lib.llm.testing import ScriptedBackend
from saber_lib.llm.types import ChatResult, Failure
from saber_lib.judging.tournament import Doc
from saber_lib.judging.judge_base import Judge
from saber_lib.judging.outcomes import TIE, outcome_label
from saber_lib.judging.simulated import SimulatedJudge, calibrate_scale

Q = Doc("q", "Solve x^2 = 4.", "Factor.")
A = Doc("a", "GOOD: solve x^2 = 9.", "Factor as (x-3)(x+3).")
B = Doc("b", "Count subsets of a 5-set.", "2^5.")


def shown(req):
    """(first, second) candidate problems of a pairwise prompt."""
    user = [m["content"] for m in req.messages if m["role"] == "user"][0]
    first = re.search(r"## Candidate 1\nProblem:\n(.*?)\n", user).group(1)
    second = re.search(r"## Candidate 2\nProblem:\n(.*?)\n", user).group(1)
    return first, second


def prefers_good(req):
    first, _ = shown(req)
    return "Notes... \\boxed{1}" if first.startswith("GOOD") else "Notes... \\boxed{2}"


def test_llm_judge_parses_the_last_boxed_choice_in_both_orders():
    be = ScriptedBackend(prefers_good)
    judge = judges.LLMJudge(be, retries=1)
    assert judge.judge_pairs([(Q, A, B), (Q, B, A)]) == [1, 2]
    assert judge.judge(Q, A, B) == 1
    assert judge.name == "llm:scripted"
    assert "Solve x^2 = 4." in be.seen[0].messages[-1]["content"]


def test_llm_judge_retries_then_fails_with_a_reason():
    answers = iter(["I think the first one.", "\\boxed{2} ... actually \\boxed{1}"])
    be = ScriptedBackend(lambda req: next(answers))
    out = judges.LLMJudge(be, retries=1).judge_pairs([(Q, A, B)])
    assert out == [1]
    assert [r.attempt for r in be.seen] == [0, 1]  # the retry is a new call, not the cached answer

    be2 = ScriptedBackend(lambda req: "\\boxed{3}")
    got = judges.LLMJudge(be2, retries=2).judge_pairs([(Q, A, B)])[0]
    assert isinstance(got, Failure) and not got
    assert "unparseable" in got.reason and got.attempts == 3
    assert outcome_label(got) == ("failure", got.reason)

    be3 = ScriptedBackend(lambda req: ChatResult(error="HTTP 500"))
    got = judges.LLMJudge(be3, retries=0).judge(Q, A, B)
    assert isinstance(got, Failure) and "HTTP 500" in got.reason


@pytest.mark.parametrize("both_orders", [True, False])
def test_logprob_judge_asks_again_for_an_answer_without_an_option(tmp_path, both_orders):
    # A and C beat B; the first answer to each order showing A and B has neither option
    C = Doc("c", "Another: solve x^2 = 16.", "Factor.")
    asked: dict = {}

    def respond(req):
        order = shown(req)
        asked[order] = asked.get(order, 0) + 1
        if A.problem in order and asked[order] == 1:
            return ChatResult(text="", logprobs={})
        first_wins = order[0] in (A.problem, C.problem)
        return ChatResult(text="", logprobs={"1": -0.1, "2": -2.0} if first_wins else {"1": -2.0, "2": -0.1})

    db = tmp_path / "llm.sqlite"
    n_orders = 2 if both_orders else 1
    be = ScriptedBackend(respond, cache=ResponseCache(db))
    j = judges.LLMJudge(be, retries=0, logprob=True, both_orders=both_orders)
    first = j.judge_pairs([(Q, A, B), (Q, C, B)])
    assert isinstance(first[0], Failure) and "neither" in first[0].reason and first[1] == 1
    assert j.stats["failures"] == 1 and be.usage()["calls"] == 2 * n_orders
    # the rerun asks the model again for the pair that failed (its answers were not kept), the other
    # comes from the cache; no failure is left
    be2 = ScriptedBackend(respond, cache=ResponseCache(db))
    j2 = judges.LLMJudge(be2, retries=0, logprob=True, both_orders=both_orders)
    assert j2.judge_pairs([(Q, A, B), (Q, C, B)]) == [1, 1] and j2.stats["failures"] == 0
    assert (be2.usage()["calls"], be2.usage()["cached"]) == (n_orders, n_orders)
    assert all(A.problem in shown(r) for r in be2.seen)
    # 1 failed and 1 good answer per order of (A, B), one answer per order of (C, B)
    assert sorted(asked.values()) == sorted([2] * n_orders + [1] * n_orders)
    # within one run, a retry (a new attempt) answers it: no failure, both attempts were calls
    asked.clear()
    be3 = ScriptedBackend(respond, cache=ResponseCache(tmp_path / "other.sqlite"))
    j3 = judges.LLMJudge(be3, retries=1, logprob=True, both_orders=both_orders)
    assert j3.judge_pairs([(Q, A, B)]) == [1] and j3.stats["failures"] == 0
    assert [r.attempt for r in be3.seen] == [0] * n_orders + [1] * n_orders


def test_llm_judge_votes_are_independent_calls():
    be = ScriptedBackend(lambda req: "\\boxed{1}" if req.attempt == 0 else "\\boxed{2}")
    j = judges.LLMJudge(be)
    assert j.judge(Q, A, B) == 1
    assert j.variant(2).judge(Q, A, B) == 2
    assert be.seen[-1].attempt == 2000


def test_logprob_judge_single_and_both_orders():
    def lp(req):
        assert req.prefill == "\\boxed{" and req.logprobs_for == ("1", "2")
        first, _ = shown(req)
        # position bias towards "1", plus a preference for the GOOD candidate
        good_first = first.startswith("GOOD")
        return ChatResult(text="", logprobs={"1": -0.2 if good_first else -0.5, "2": -1.0 if good_first else -0.9})

    be = ScriptedBackend(lp)
    single = judges.LLMJudge(be, logprob=True, both_orders=False)
    assert single.judge_pairs([(Q, A, B), (Q, B, A)]) == [1, 1]  # biased: "1" both times
    both = judges.LLMJudge(be, logprob=True)
    # margin (A first) = (-0.2 + 1.0) + (-0.9 + 0.5) = 0.4 > 0 -> A, whichever order is asked
    assert both.judge_pairs([(Q, A, B), (Q, B, A)]) == [1, 2]
    none = ScriptedBackend(lambda req: ChatResult(text="", logprobs={"1": None, "2": None}))
    assert isinstance(judges.LLMJudge(none, logprob=True, both_orders=False).judge(Q, A, B), Failure)


class ScriptJudge(Judge):
    """Answers from a function of (first id, second id, vote)."""

    def __init__(self, fn, vote=0):
        super().__init__()
        self.fn, self.vote = fn, vote
        self.name = "script"

    def variant(self, k):
        return ScriptJudge(self.fn, k)

    def judge_pairs(self, items):
        return [self.fn(a.id, b.id, self.vote) for _, a, b in items]


def test_swapped_judge_turns_position_bias_into_ties_and_reports_it():
    always_first = ScriptJudge(lambda a, b, v: 1)
    sj = judges.SwappedJudge(always_first, "tie")
    assert sj.judge_pairs([(Q, A, B), (Q, B, A)]) == [TIE, TIE]
    assert sj.last_consistency == [False, False]
    assert sj.position_bias_rate == 1.0 and sj.first_position_rate == 1.0

    fair = ScriptJudge(lambda a, b, v: 1 if a == "a" else 2)
    sj = judges.SwappedJudge(fair)
    assert sj.judge_pairs([(Q, A, B), (Q, B, A)]) == [1, 2]
    assert sj.last_consistency == [True, True] and sj.position_bias_rate == 0.0
    assert sj.first_position_rate == 0.5


def test_swapped_judge_reask_and_failures():
    # vote 0 always says "first"; the re-ask (vote 1) prefers candidate a
    fn = lambda a, b, v: 1 if v == 0 else (1 if a == "a" else 2)  # noqa: E731
    sj = judges.SwappedJudge(ScriptJudge(fn), "reask")
    assert sj.judge_pairs([(Q, A, B), (Q, B, A)]) == [1, 2]
    assert sj.stats["reasked"] == 2
    # one order fails: the other order decides; both fail: failure
    half = ScriptJudge(lambda a, b, v: Failure("x") if a == "a" else 1)
    sj = judges.SwappedJudge(half)
    assert sj.judge_pairs([(Q, A, B)]) == [2]  # (b, a) said "first" = b
    assert sj.last_consistency == [None]
    dead = judges.SwappedJudge(ScriptJudge(lambda a, b, v: Failure("down")))
    assert isinstance(dead.judge(Q, A, B), Failure)
    with pytest.raises(ValueError, match="swap_disagreement"):
        judges.SwappedJudge(always := ScriptJudge(lambda a, b, v: 1), "coin")  # noqa: F841


@pytest.mark.parametrize("votes,expected", [
    ([1, 1, 1, 2, 2], TIE),        # margin 1 -> tie
    ([1, 1, 1, 1, 2], 1),
    ([2, 2, 2, 2, 2], 2),
    ([2, 2, 2, 1, "f"], 2),          # failures cast no vote: 3 vs 1
    ([1, "f", "f", "f", 2], TIE),
])
def test_majority_judge_margin_rule(votes, expected):
    fn = lambda a, b, v: Failure("no") if votes[v] == "f" else votes[v]  # noqa: E731
    mj = judges.MajorityJudge(ScriptJudge(fn), votes=5)
    assert mj.judge(Q, A, B) == expected


def test_majority_all_failed():
    mj = judges.MajorityJudge(ScriptJudge(lambda a, b, v: Failure("down")), votes=3)
    assert isinstance(mj.judge(Q, A, B), Failure)


def test_ordinal_judge_scores_each_candidate_once():
    def score(req):
        user = req.messages[-1]["content"]
        return "\\boxed{80}" if "GOOD" in user else "\\boxed{35}"

    be = ScriptedBackend(score)
    oj = judges.OrdinalJudge(be)
    assert oj.judge_pairs([(Q, A, B), (Q, B, A)]) == [1, 2]
    assert len(be.seen) == 2  # a and b scored once each
    assert oj.scores[("q", "a")] == 80
    same = judges.OrdinalJudge(ScriptedBackend(lambda r: "\\boxed{50}"))
    assert same.judge(Q, A, B) == TIE
    bad = judges.OrdinalJudge(ScriptedBackend(lambda r: "\\boxed{150}"), retries=0)
    assert isinstance(bad.judge(Q, A, B), Failure)


def test_ordinal_judge_score_only_reads_the_prefilled_score():
    """Small-model mode: the score-only prompt, answered right after its ``\\boxed{`` prefill."""
    def score(req):
        assert req.prefill == "\\boxed{" and req.meta["template"] == "ordinal_judge_score"
        return "\\boxed{" + ("90}" if "GOOD" in req.messages[1]["content"] else "12}")

    oj = judges.OrdinalJudge(ScriptedBackend(score), score_only=True)
    assert oj.judge_pairs([(Q, A, B), (Q, B, A)]) == [1, 2]
    assert oj.scores[("q", "a")] == 90 and oj.scores[("q", "b")] == 12


class FakeEncoder:
    name = "fake"
    model_id = "fake-v1"
    symmetric = True
    dim = 3

    def __init__(self):
        self.encoded = []

    def encode(self, texts, kind="document", batch_size=32):
        self.encoded += list(texts)
        out = []
        for t in texts:
            out.append([1.0, 0.0, 0.0] if "x^2" in t else [0.0, 1.0, 0.2])
        return np.array(out, dtype=np.float32)


def test_proxy_judge_prefers_the_closer_embedding():
    enc = FakeEncoder()
    pj = judges.ProxyJudge(enc)
    assert pj.judge_pairs([(Q, A, B), (Q, B, A), (Q, A, A)]) == [1, 2, TIE]
    assert len(enc.encoded) == 3  # each distinct text embedded once
    assert pj.name == "proxy:fake-cosine"
    with pytest.raises(ValueError, match="evaluated retriever"):
        judges.ProxyJudge("minilm")


def test_calibrated_simulated_judge_agrees_at_the_chosen_rate():
    for target in (0.65, 0.78, 0.9):
        c = calibrate_scale(target)
        rng = np.random.default_rng(0)
        d = rng.standard_normal(200_000) - rng.standard_normal(200_000)
        assert np.mean(1 / (1 + np.exp(-c * np.abs(d)))) == pytest.approx(target, abs=0.003)
    assert calibrate_scale(0.6) < calibrate_scale(0.8)
    with pytest.raises(ValueError):
        calibrate_scale(1.0)


def test_simulated_judge_behaviour():
    sj = SimulatedJudge(0.78, seed=5)
    cands = [Doc(f"c{k}", "p") for k in range(60)]
    items = [(Q, a, b) for i, a in enumerate(cands) for b in cands[i + 1:]]
    out = sj.judge_pairs(items)
    assert out == sj.judge_pairs(items)  # same question, same answer
    s = {c.id: sj.strength("q", c.id) for c in cands}
    agree = np.mean([(o == 1) == (s[a.id] > s[b.id]) for o, (_, a, b) in zip(out, items)])
    assert agree == pytest.approx(0.78, abs=0.03)
    other = sj.variant(1).judge_pairs(items)
    assert 0.55 < np.mean(np.array(out) == np.array(other)) < 0.95  # independent draws, same p
    fixed = SimulatedJudge(0.9, strengths={("q", "a"): 3.0, ("q", "b"): -3.0})
    assert np.mean([fixed.variant(k).judge(Q, A, B) == 1 for k in range(50)]) > 0.9


def test_judge_from_profile():
    assert isinstance(judge_from_profile(JudgeSettings.paper(judge="simulated")), SimulatedJudge)
    sw = judge_from_profile(JudgeSettings.paper(judge="simulated", position_swap=True, swap_disagreement="reask"))
    assert isinstance(sw, judges.SwappedJudge) and sw.name.endswith("+swap(reask)")
    with pytest.raises(ValueError, match="needs an LLM backend"):
        judge_from_profile(JudgeSettings.paper(judge="llm"))
    with pytest.raises(ValueError, match="unknown kind 'oracle'"):
        judge_from_profile(JudgeSettings.paper(judge="oracle"))


def test_proxy_judge_ties_vectors_that_differ_only_by_float_noise():
    class NoisyEncoder(FakeEncoder):
        def encode(self, texts, kind="document", batch_size=32):
            # "b" is "a" embedded in another batch: equal up to float32 noise
            table = {"q": [1.0, 0.0, 0.0], "a": [0.6, 0.8, 0.0], "b": [0.6 + 3e-7, 0.8 - 2e-7, 0.0],
                     "c": [0.7, 0.7, 0.1]}
            return np.array([table[t] for t in texts], dtype=np.float64)

    pj = judges.ProxyJudge(NoisyEncoder())
    q, a, b, c = ({"problem": x, "solution": ""} for x in "qabc")
    pj_text = judges._text   # the text function the judges module calls, patched there
    try:
        judges._text = lambda d: d["problem"]
        assert pj.judge_pairs([(q, a, b), (q, b, a), (q, c, a)]) == [TIE, TIE, 1]
    finally:
        judges._text = pj_text


def test_the_simulated_judge_noiseless_biased_and_callable():
    """One simulated judge: noiseless at agreement 1 (always the stronger, whatever the order
    shown), a planted first-shown bias on equal strengths wins at sigmoid(bias), and the label
    interface answers as judge_pairs does."""
    from saber_lib.judging.simulated import SimulatedJudge

    s = {("q", f"c{i}"): float(i) for i in range(6)}
    exact = SimulatedJudge(1.0, strengths=s)
    assert all(exact("q", f"c{i}", f"c{j}") == ("a" if i > j else "b") for i in range(6) for j in range(6) if i != j)
    eq = {("q", f"c{i}"): 0.0 for i in range(400)}
    biased = SimulatedJudge(0.78, seed=3, strengths=eq, bias=1.0)
    wins = [biased("q", f"c{i}", f"c{j}") == "a" for i in range(0, 400, 2) for j in range(1, 400, 20)]
    assert np.mean(wins) == pytest.approx(1 / (1 + np.exp(-1.0)), abs=0.03)
    items = [("q", f"c{i}", f"c{i + 1}") for i in range(0, 40, 2)]
    assert [{1: "a", 2: "b"}[o] for o in biased.judge_pairs(items)] == [biased(*x) for x in items]
