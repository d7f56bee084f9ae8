import math

import numpy as np
import polars as pl
import pytest

from saber_lib.robustness import simulate
from saber_lib.judging.outcomes import codes_of_labels
from saber_lib.robustness.stopping import batch_judge, compare_to_plain, query_spread, run_with_stopping

QUAL = {"good": 0.3, "bad": 2.0}


@pytest.fixture(scope="module")
def case():
    bench = simulate.SyntheticBenchmark(n_queries=6, n_cands=12, seed=7)
    return bench, bench.scores(QUAL, seed=8)


def _run(case, **kw):
    bench, scores = case
    judge = bench.judge(agreement=0.78, seed=1)
    kw.setdefault("n_draws", 16)
    return run_with_stopping(bench.query_ids, bench.cand_ids, judge, scores, progress=False, **kw)


def test_never_stops_before_one_full_round(case):
    # a tolerance that every query meets at once: each stops right after its first full Swiss round
    res = _run(case, rule="stable", tol=10.0, max_rounds=8)
    assert res.rounds["rounds"].to_list() == [1] * 6
    assert set(res.rounds["stopped_by"]) == {"stable"}
    assert res.judgments["round"].max() == 1 and res.n_judgments == 6 * 6  # 12 candidates: 6 pairs a round
    # min_rounds above 1 is honoured as well
    res = _run(case, rule="either", tol=10.0, max_rounds=8, min_rounds=3)
    assert res.rounds["rounds"].to_list() == [3] * 6 and res.n_judgments == 6 * 6 * 3


def test_never_exceeds_R_and_matches_plain_swiss_when_it_never_stops(case):
    bench, _ = case
    res = _run(case, rule="stable", tol=-1.0, max_rounds=5, seed=3)
    assert res.rounds["rounds"].max() == 5 and res.judgments["round"].max() == 5
    assert set(res.rounds["stopped_by"]) == {"max_rounds"}
    plain = simulate.swiss_judgments(bench, bench.judge(agreement=0.78, seed=1), rounds=5, seed=3)
    key = ["query_id", "round", "a", "b", "outcome"]
    assert res.judgments.select(key).sort(key).equals(plain.select(key).sort(key))
    cmp = compare_to_plain(res.ratings, simulate.ratings_table(bench, plain), case[1])
    assert cmp["kendall_tau"] == 1.0 and cmp["max_abs_change"] < 1e-12 and cmp["same_order"]


@pytest.mark.parametrize("rule", ["stable", "plateau", "either"])
@pytest.mark.parametrize("R", [1, 2, 4])
def test_bounds_hold_for_every_rule(case, rule, R):
    res = _run(case, rule=rule, tol=0.05, min_shrink=0.05, window=1, max_rounds=R)
    rounds = res.rounds["rounds"].to_numpy()
    assert rounds.min() >= 1 and rounds.max() <= R
    per_q = res.judgments.group_by("query_id").agg(pl.col("round").max().alias("r"), pl.len().alias("n"))
    assert per_q["r"].max() <= R and (per_q["n"] >= 6).all()


def test_noiseless_model_is_stable_after_one_round(case):
    # with an infinitely sharp judge model the draws equal the data: nDCG cannot move, stop at once
    res = _run(case, rule="stable", tol=0.0, sharpness=math.inf, max_rounds=6)
    assert res.rounds["rounds"].to_list() == [1] * 6
    assert (res.history["spread"] == 0).all()


def test_query_spread_shrinks_with_more_judgments():
    bench = simulate.SyntheticBenchmark(n_queries=1, n_cands=16, seed=2)
    scores = bench.scores({"r": 0.5}, seed=3)
    J = simulate.swiss_judgments(bench, bench.judge(agreement=0.78), rounds=15)
    q = bench.query_ids[0]
    idx = {c: i for i, c in enumerate(bench.cand_ids[q])}
    order = np.argsort(-scores.sort("cand_id")["score"].to_numpy(), kind="stable")[None, :]

    def spread(r):
        g = J.filter(pl.col("round") <= r)
        return query_spread(16, [idx[x] for x in g["a"]], [idx[x] for x in g["b"]],
                            codes_of_labels(g["outcome"]), order, n_draws=200,
                            rng=np.random.default_rng(0), sharpness=1.5)

    assert spread(15) < spread(2)
    assert query_spread(16, [], [], [], order) == math.inf


def test_bad_arguments(case):
    with pytest.raises(ValueError):
        _run(case, rule="sometimes")
    with pytest.raises(ValueError):
        _run(case, max_rounds=2, min_rounds=3)


def test_batch_judges_and_judge_objects_give_the_same_run(case):
    bench, scores = case
    judge = bench.judge(agreement=0.78, seed=1)
    one = run_with_stopping(bench.query_ids, bench.cand_ids, judge, scores, rule="either", tol=0.2, max_rounds=4,
                            n_draws=16, progress=False)

    class LikeJudge:  # the interface of saber_lib.judging.judge_base.Judge: 1 = first shown, 2 = second
        name = "like-judge"

        def judge_pairs(self, items):
            return [1 if judge(q, a, b) == "a" else 2 for q, a, b in items]

    docs = {x: x for q in bench.query_ids for x in [q] + bench.cand_ids[q]}
    calls = []
    bj = batch_judge(LikeJudge(), docs)
    counted = lambda triples: calls.append(len(triples)) or bj(triples)
    two = run_with_stopping(bench.query_ids, bench.cand_ids, counted, scores, rule="either", tol=0.2, max_rounds=4,
                            n_draws=16, batch=True, progress=False)
    key = ["query_id", "round", "a", "b", "outcome"]
    assert one.judgments.select(key).equals(two.judgments.select(key))
    assert len(calls) == two.judgments["round"].max() and sum(calls) == two.n_judgments


def test_noiseless_judge_stops_early_and_keeps_conclusions():
    """A noiseless judge, judged with its own (infinite) sharpness: every draw reproduces the
    verdicts, so the stable rule stops each query at min_rounds; three retrievers of planted,
    well-separated quality keep their order and every significant difference of the full
    tournament, with a third of its judgments."""
    bench = simulate.SyntheticBenchmark(n_queries=24, n_cands=10, seed=5)
    scores = bench.scores({"good": 0.05, "mid": 0.8, "bad": 4.0}, seed=6)
    judge = bench.judge(agreement=1.0, seed=2)
    R = 9
    res = run_with_stopping(bench.query_ids, bench.cand_ids, judge, scores, rule="stable", tol=0.0, min_rounds=3,
                            max_rounds=R, sharpness=math.inf, n_draws=8, progress=False)
    assert set(res.rounds["stopped_by"]) == {"stable"} and res.rounds["rounds"].to_list() == [3] * 24
    plain_j = simulate.swiss_judgments(bench, bench.judge(agreement=1.0, seed=2), rounds=R)
    cmp = compare_to_plain(res.ratings, simulate.ratings_table(bench, plain_j), scores, alpha=0.05,
                           n_permutations=2000)
    assert res.n_judgments == 24 * 5 * 3 and res.n_judgments / plain_j.height < 0.4   # 5 pairs a round
    assert cmp["same_order"] and cmp["significant_pairs"] == 3 and cmp["significant_kept"] == 3
    assert cmp["conclusions_kept"]


def test_conclusions_lost_when_the_stopped_ratings_reverse_a_difference(case):
    """Planted: the 'stopped' table gives every query reversed ratings, so the good retriever is
    now the worse one: order and the significant difference are both lost."""
    bench, scores = case
    plain = simulate.ratings_table(bench, simulate.swiss_judgments(bench, bench.judge(agreement=1.0), rounds=8))
    flipped = plain.with_columns((5.0 - pl.col("rating")).alias("rating"))
    cmp = compare_to_plain(flipped, plain, scores, alpha=0.05, n_permutations=2000)
    assert cmp["significant_pairs"] == 1 and cmp["significant_kept"] == 0
    assert not cmp["same_order"] and not cmp["conclusions_kept"]
    same = compare_to_plain(plain, plain, scores, alpha=0.05, n_permutations=2000)
    assert same["conclusions_kept"] and same["new_significant"] == 0
