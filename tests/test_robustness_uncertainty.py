import math

import numpy as np
import polars as pl
import pytest

from saber_lib.metrics.ndcg import ndcg_at_k
from saber_lib.robustness import simulate
from saber_lib.judging.draws import (calibrate_sharpness, draws_for_query, judge_sharpness, rating_draws, rating_se,
                                     ratings_with_se, win_graph_is_acyclic)
from saber_lib.judging.judges import prompt_hash
from saber_lib.metrics.ndcg import ndcg_matrix, rankings
from saber_lib.robustness.intervals import ndcg_two_level
from saber_lib.evaluate.export import qrels_sidecar, write_qrels_sidecar
from saber_lib.judging.bradley_terry import fit_bradley_terry, rescale


@pytest.fixture(scope="module")
def small():
    bench = simulate.SyntheticBenchmark(n_queries=12, n_cands=12, seed=3)
    scores = bench.scores({"good": 0.3, "mid": 1.0, "bad": 3.0}, seed=4)
    return bench, scores


def test_batched_fit_matches_the_single_fit():
    rng = np.random.default_rng(0)
    n, K = 9, 40
    w = rng.integers(0, n, K)
    lo = (w + rng.integers(1, n, K)) % n
    W = rng.poisson(1.0, (5, K)).astype(float) * 0.5
    th = fit_bradley_terry(n, w, lo, alpha=0.5, weights=W, tol=1e-9, max_iter=100)
    assert th.shape == (5, n)
    for d in range(5):
        ref = fit_bradley_terry(n, w, lo, alpha=0.5, weights=W[d])
        np.testing.assert_allclose(th[d], ref, atol=1e-8)
    np.testing.assert_allclose(rescale(th)[2], rescale(th[2]), atol=1e-12)


def test_acyclic_detection_and_sharpness():
    # verdict codes seen from a (saber_lib.judging.outcomes.CODE_OF_LABEL): 1 a, -1 b, 0 tie
    assert win_graph_is_acyclic(4, [0, 2, 2], [1, 1, 3], [1, -1, 1])       # 0>1, 1>2, 2>3
    assert not win_graph_is_acyclic(3, [0, 1, 2], [1, 2, 0], [1, 1, 1])    # 0>1>2>0
    assert not win_graph_is_acyclic(2, [0], [1], [0])                      # a tie
    assert calibrate_sharpness([1.0, 2.0, 0.5]) == math.inf
    # margins +1 (weight 3) and -1 (weight 1): the score 3 sigmoid(-k) - sigmoid(k) = 0 at k = ln 3
    assert calibrate_sharpness([1.0, -1.0], [3.0, 1.0]) == pytest.approx(math.log(3), abs=1e-8)
    assert calibrate_sharpness([1.0, -1.0], [1.0, 2.0]) == 0.0


def test_sharpness_infinite_for_noiseless_and_finite_for_noisy(small):
    bench, _ = small
    J0 = simulate.swiss_judgments(bench, bench.judge(agreement=1.0), rounds=5)
    assert judge_sharpness(J0) == math.inf
    J1 = simulate.swiss_judgments(bench, bench.judge(agreement=0.78), rounds=6)
    k = judge_sharpness(J1)
    assert 0.5 < k < 20


def test_noiseless_judge_has_zero_spread_and_zero_judging_part(small):
    bench, scores = small
    judge = bench.judge(agreement=1.0)
    J = simulate.swiss_judgments(bench, judge, rounds=5)
    assert simulate.realized_agreement(bench, J) == 1.0
    ratings = simulate.ratings_table(bench, J)
    draws = rating_draws(J, ratings, n_draws=30, seed=1, method="outcomes", progress=False)
    assert draws.height == ratings.height * 30
    se = rating_se(draws)
    assert float(se["rating_se"].max()) == 0.0
    # every draw reproduces the point ratings
    j = draws.join(ratings.select("query_id", "cand_id", "rating"), on=["query_id", "cand_id"], suffix="_pt")
    assert float((j["rating"] - j["rating_pt"]).abs().max()) < 1e-9
    u = ndcg_two_level(scores, ratings, draws, n_boot=300, seed=2, progress=False)
    s = u.summary
    assert s["var_judge"].max() == 0.0 and s["judge_variance_share"].max() == 0.0
    assert s["width_added_by_judge"].abs().max() < 1e-12
    np.testing.assert_allclose(s["lo_two_level"], s["lo_query"], atol=1e-12)
    np.testing.assert_allclose(s["hi_two_level"], s["hi_query"], atol=1e-12)
    assert (u.swaps["p_swap_judging"] == 0).all()


def test_default_draws_give_a_deterministic_judge_a_spread(small):
    """The default draws bootstrap each query's own judgments: after a finite tournament a
    deterministic judge's ratings are uncertain (every candidate that was judged moves)."""
    bench, _ = small
    J = simulate.swiss_judgments(bench, bench.judge(agreement=1.0), rounds=5)
    ratings = simulate.ratings_table(bench, J)
    draws = rating_draws(J, ratings, n_draws=40, seed=1, progress=False)
    se = ratings_with_se(ratings, draws)
    assert (se.filter(pl.col("n_judged") > 0)["rating_se"] > 0).all()
    # more rounds, more judgments per candidate: a smaller spread
    J20 = simulate.swiss_judgments(bench, bench.judge(agreement=1.0), rounds=20)
    d20 = rating_draws(J20, simulate.ratings_table(bench, J20), n_draws=40, seed=1, progress=False)
    assert float(rating_se(d20)["rating_se"].mean()) < float(se["rating_se"].mean())


def test_bootstrap_draws_of_one_query_match_a_brute_force_refit():
    """Draw d of the default method is the fit on the judgments the bootstrap picked: rebuild it
    from the judgments drawn (uniform indices, with replacement) with the same generator."""
    a, b, codes = [0, 1, 2, 0, 3], [1, 2, 3, 2, 1], [1, 1, -1, 0, 1]
    R = draws_for_query(4, a, b, codes, n_draws=6, rng=np.random.default_rng(4), return_theta=True)
    picked = np.random.default_rng(4).integers(0, 5, size=(6, 5))
    for d in range(6):
        w, lo, wt = [], [], []
        for k in picked[d]:
            if codes[k] == 0:
                w += [a[k], b[k]]; lo += [b[k], a[k]]; wt += [0.5, 0.5]
            else:
                w.append(a[k] if codes[k] == 1 else b[k]); lo.append(b[k] if codes[k] == 1 else a[k])
                wt.append(1.0)
        np.testing.assert_allclose(R[d], fit_bradley_terry(4, w, lo, weights=wt), atol=1e-6)


def test_noisy_judge_spread_and_variance_split(small):
    bench, scores = small
    J = simulate.swiss_judgments(bench, bench.judge(agreement=0.78), rounds=6)
    ratings = simulate.ratings_table(bench, J)
    draws = rating_draws(J, ratings, n_draws=60, seed=5, method="outcomes", progress=False)
    se = rating_se(draws)
    assert float(se["rating_se"].mean()) > 0.05
    assert draws["rating"].min() >= 0 and draws["rating"].max() <= 5 + 1e-12
    out = ratings_with_se(ratings, draws)
    assert out.height == ratings.height and out["rating_se"].null_count() == 0
    u = ndcg_two_level(scores, ratings, draws, n_boot=4000, seed=6, progress=False)
    s = u.summary
    share = s["judge_variance_share"]
    assert (s["var_judge"] > 0).all() and ((share > 0) & (share < 1)).all()
    np.testing.assert_allclose(share, s["var_judge"] / (s["var_query"] + s["var_judge"]), rtol=1e-12)
    # the judge never narrows the interval, beyond Monte Carlo error
    assert (s["width_two_level"] >= s["width_query_only"] - 0.05 * s["width_query_only"]).all()
    # var_query + var_judge is the exact variance of the two-level resample mean: a direct simulation
    P, N = u.arrays.point, u.arrays.draws
    S, Q, D = N.shape
    rng = np.random.default_rng(11)
    qi = rng.integers(0, Q, (20000, Q))
    di = rng.integers(0, D, (20000, Q))
    emp = (P[:, qi] + N[:, qi, di] - N.mean(axis=2)[:, qi]).mean(axis=2).var(axis=1)
    np.testing.assert_allclose(s["var_query"] + s["var_judge"], emp, rtol=0.08)
    # a retriever far better than another almost never swaps with it
    sw = u.swaps.filter((pl.col("retriever_1") == "good") & (pl.col("retriever_2") == "bad"))
    assert float(sw["p_swap_two_level"][0]) < 0.05


def test_two_level_is_not_narrowed_by_draws_pulled_to_the_middle():
    """Planted: point nDCG P[q] spread over queries, and draws whose mean is pulled halfway to the
    grand mean (as a refit on resampled judgments does) with judge noise of sd 0.15. Averaging the
    draws themselves gave a narrower interval than the query-only one; the centred two-level
    interval has the known variance (var_q(P) + 0.15^2) / Q."""
    from saber_lib.robustness.intervals import NdcgArrays, ndcg_uncertainty_from_arrays

    rng = np.random.default_rng(0)
    Q, D = 300, 200
    P = rng.uniform(0.2, 0.9, size=(1, Q))
    shrunk = 0.5 * P + 0.5 * P.mean()
    noise = rng.normal(0, 0.15, size=(1, Q, D))
    noise -= noise.mean(axis=2, keepdims=True)
    N = shrunk[:, :, None] + noise
    arr = NdcgArrays([("r", "s")], [f"q{i}" for i in range(Q)], P, N)
    s = ndcg_uncertainty_from_arrays(arr, n_boot=6000, seed=1).summary
    known = (P.var() + noise.var(axis=2).mean()) / Q          # 0.15^2 up to the sample's own variance
    assert float(s["var_query"][0] + s["var_judge"][0]) == pytest.approx(known, rel=1e-9)
    assert known == pytest.approx((P.var() + 0.15 ** 2) / Q, rel=0.01)
    z = 1.959964
    assert float(s["width_two_level"][0]) == pytest.approx(2 * z * math.sqrt(known), rel=0.06)
    assert float(s["width_two_level"][0]) > float(s["width_query_only"][0])
    added = 2 * z * (math.sqrt(known) - math.sqrt(P.var() / Q))
    assert float(s["width_added_by_judge"][0]) == pytest.approx(added, abs=0.3 * added)
    # the draws' own means would have given half the query spread: the old, narrower interval
    assert shrunk.var() / Q < P.var() / Q


def test_draws_are_seeded_and_per_query(small):
    bench, _ = small
    J = simulate.swiss_judgments(bench, bench.judge(agreement=0.78), rounds=3)
    d1 = rating_draws(J, n_draws=5, seed=9, sharpness=1.0, progress=False)
    d2 = rating_draws(J.filter(pl.col("query_id") == bench.query_ids[1]), n_draws=5, seed=9, sharpness=1.0,
                      progress=False)
    sub = d1.filter(pl.col("query_id") == bench.query_ids[1])
    assert sub.equals(d2)
    assert not rating_draws(J, n_draws=5, seed=10, sharpness=1.0, progress=False).equals(d1)


def test_ndcg_matrix_matches_the_evaluation_kernel():
    rng = np.random.default_rng(2)
    rel = rng.uniform(0, 5, (4, 15))
    sc = rng.standard_normal((3, 15))
    sc[1, 3] = sc[1, 7]  # a tie, broken by candidate order
    got = ndcg_matrix(rel, rankings(sc), k=10)
    for d in range(4):
        for s in range(3):
            assert got[d, s] == pytest.approx(ndcg_at_k(rel[d], sc[s], 10), abs=1e-12)
    assert ndcg_matrix(np.zeros((1, 5)), rankings(sc[:, :5]))[0].tolist() == [0.0, 0.0, 0.0]


def test_qrels_sidecar_counts_and_file(tmp_path):
    ratings = pl.DataFrame({"query_id": ["q", "q", "q"], "cand_id": ["x", "y", "z"], "rating": [5.0, 2.5, 0.0]})
    J = pl.DataFrame({"query_id": ["q"] * 4, "round": [1, 1, 2, 2], "a": ["x", "y", "x", "z"],
                      "b": ["y", "z", "z", "y"], "outcome": ["a", "tie", "failure", "b"],
                      "judge": ["j"] * 4, "reason": [None, None, "boom", None]})
    draws = pl.DataFrame({"query_id": ["q"] * 6, "cand_id": ["x", "y", "z"] * 2, "draw": [0, 0, 0, 1, 1, 1],
                          "rating": [5.0, 2.0, 0.0, 5.0, 3.0, 0.0]})
    h = prompt_hash("Which candidate is closer?")
    side = qrels_sidecar(ratings, draws, J, judge_id="sim", prompt_hash=h)
    seen = dict(zip(side["cand_id"], side["judgments_seen"]))
    assert seen == {"x": 1, "y": 3, "z": 2}  # the failed judgment x-z does not count
    se = dict(zip(side["cand_id"], side["rating_se"]))
    assert se["y"] == pytest.approx(math.sqrt(0.5)) and se["x"] == 0.0
    assert len(h) == 16 and h == prompt_hash("Which candidate is closer?") != prompt_hash("other")
    path = write_qrels_sidecar(side, tmp_path)
    lines = path.read_text().splitlines()
    assert lines[0].split("\t")[:3] == ["query-id", "corpus-id", "rating"] and len(lines) == 4
    assert lines[2].split("\t")[1] == "y" and lines[2].split("\t")[4] == "3"
    # the export's path: the ratings carry rating_se and n_judged (tournament/ratings.parquet)
    rated = ratings_with_se(ratings.with_columns(pl.Series("n_judged", [1, 3, 2])), draws).reverse()
    again = qrels_sidecar(rated, judge_id="sim", prompt_hash=h)
    assert again.equals(side)
    assert qrels_sidecar(ratings, judgments=J, judge_id=None)["rating_se"].null_count() == 3   # no draws, no column


def test_empty_query_gives_zero_ratings():
    R = draws_for_query(4, [], [], [], n_draws=3)
    assert R.shape == (3, 4) and not R.any()
