"""nDCG@k, bootstrap CIs, domain means and correlations against hand computations and references."""
from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from saber_lib.evaluate import tables as ev


def test_ndcg_hand_computed():
    # ranking by score: c2 (rel 3), c0 (rel 1), c1 (rel 0)
    r = [1, 0, 3]
    s = [0.5, 0.1, 0.9]
    dcg = (2**3 - 1) / math.log2(2) + (2**1 - 1) / math.log2(3) + 0
    assert ev.ndcg_at_k(r, s, k=3) == pytest.approx(dcg / dcg)  # already the ideal order
    # reversed ranking
    s2 = [0.5, 0.9, 0.1]  # c1 (0), c0 (1), c2 (3)
    dcg2 = 0 / 1 + 1 / math.log2(3) + 7 / math.log2(4)
    assert ev.ndcg_at_k(r, s2, k=3) == pytest.approx(dcg2 / dcg)
    # k = 1: only the top counts; ideal from all ratings
    assert ev.ndcg_at_k(r, s2, k=1) == 0.0
    assert ev.ndcg_at_k(r, [0.9, 0.5, 0.1], k=1) == pytest.approx(1 / 7)


def test_ndcg_ties_broken_by_position():
    r = [0, 2, 1]
    # all tied: order is c0, c1, c2
    got = ev.ndcg_at_k(r, [1.0, 1.0, 1.0], k=2)
    ideal = 3 / 1 + 1 / math.log2(3)
    assert got == pytest.approx((0 + 3 / math.log2(3)) / ideal)
    # tie between c1 and c2 only, both above c0: c1 (earlier) first
    got = ev.ndcg_at_k(r, [0.0, 5.0, 5.0], k=2)
    assert got == pytest.approx(1.0)
    got = ev.ndcg_at_k([0, 1, 2], [0.0, 5.0, 5.0], k=1)
    assert got == pytest.approx(1 / 3)


def test_ndcg_edge_cases():
    assert ev.ndcg_at_k([0, 0, 0], [0.3, 0.2, 0.1]) == 0.0           # ideal 0 -> 0
    assert ev.ndcg_at_k([], [], k=10) == 0.0
    # k larger than the list = whole list
    r, s = [2, 0, 1], [0.1, 0.2, 0.3]
    assert ev.ndcg_at_k(r, s, k=50) == pytest.approx(ev.ndcg_at_k(r, s, k=3))
    # fractional ratings (BT strengths rescaled to [0, 5]) are fine
    assert 0 < ev.ndcg_at_k([4.5, 0.2], [0, 1]) < 1
    with pytest.raises(ValueError):
        ev.ndcg_at_k([1, 2], [0.1])
    with pytest.raises(ValueError):
        ev.ndcg_at_k([1, 2], [0.1, float("nan")])
    with pytest.raises(ValueError):
        ev.ndcg_at_k([1, -1], [0.1, 0.2])


def test_ndcg_matches_sklearn_with_exponential_gain():
    from sklearn.metrics import ndcg_score

    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(2, 40))
        rel = rng.integers(0, 6, n)
        if rel.max() == 0:
            continue
        s = rng.normal(size=n)  # continuous scores: no ties
        k = int(rng.integers(1, 15))
        want = ndcg_score([np.exp2(rel) - 1], [s], k=k)
        assert ev.ndcg_at_k(rel, s, k) == pytest.approx(want, abs=1e-12)


def test_bootstrap_reproducible_and_reference():
    x = np.random.default_rng(1).normal(0.5, 0.2, 60)
    a = ev.bootstrap_ci(x, 500, 0.95, seed=3)
    b = ev.bootstrap_ci(x, 500, 0.95, seed=3)
    c = ev.bootstrap_ci(x, 500, 0.95, seed=4)
    assert a == b and a != c
    assert a[0] == pytest.approx(x.mean())
    assert a[1] < a[0] < a[2]
    # close to the normal-theory interval mean +- 1.96 se
    se = x.std(ddof=1) / math.sqrt(x.size)
    assert a[1] == pytest.approx(x.mean() - 1.96 * se, abs=0.4 * se)
    assert a[2] == pytest.approx(x.mean() + 1.96 * se, abs=0.4 * se)
    assert ev.bootstrap_ci([0.3]) == (0.3, 0.3, 0.3)
    assert ev.bootstrap_ci([0.3, 0.3, 0.3]) == (0.3, 0.3, 0.3)
    with pytest.raises(ValueError):
        ev.bootstrap_ci([])


def test_bootstrap_coverage_on_known_mean():
    # 90% intervals for the mean of Uniform(0, 1) samples: coverage of 0.5 near 0.90
    rng = np.random.default_rng(11)
    hits = 0
    trials = 200
    for t in range(trials):
        x = rng.uniform(size=50)
        _, lo, hi = ev.bootstrap_ci(x, 300, 0.90, seed=t)
        hits += lo <= 0.5 <= hi
    assert 0.82 <= hits / trials <= 0.96


def test_domain_means_multilabel_and_groups():
    v = [1.0, 0.0, 0.5]
    qd = [["Algebra"], ["Algebra", "Geometry"], []]
    got = ev.domain_means(v, qd, ["Algebra", "Geometry", "Combinatorics"])
    assert got["Algebra"] == 0.5 and got["Geometry"] == 0.0 and math.isnan(got["Combinatorics"])
    assert ev.group_means([1, 2, 3, 5], ["1", "2", "1", None]) == {"1": 2.0, "2": 2.0}


def test_correlations():
    from scipy import stats

    x = [0.1, 0.4, 0.2, 0.8, 0.5]
    y = [1.0, 2.4, 2.5, 4.0, 3.5]
    c = ev.correlations(x, y)
    assert c["pearson"] == pytest.approx(np.corrcoef(x, y)[0, 1])
    assert c["spearman"] == pytest.approx(stats.spearmanr(x, y).statistic)
    # ranks 1,3,2,5,4 vs 1,2,3,5,4: sum d^2 = 2, rho = 1 - 6*2 / (5*(25-1)) = 0.9
    assert c["spearman"] == pytest.approx(0.9)
    assert math.isnan(ev.correlations([1, 2], [2, 3])["pearson"])


def test_ndcg_table_and_summary():
    ratings = pl.DataFrame({"query_id": ["q1"] * 3 + ["q2"] * 3, "cand_id": ["a", "b", "c", "d", "e", "f"],
                            "position": [0, 1, 2, 0, 1, 2], "rating": [0, 2, 1, 1, 0, 0]})
    scores = pl.DataFrame({"retriever": ["r"] * 6, "setting": ["s"] * 6,
                           "query_id": ["q2", "q2", "q2", "q1", "q1", "q1"],
                           "cand_id": ["d", "e", "f", "a", "b", "c"], "score": [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]})
    t = ev.ndcg_table(scores, ratings, k=2)
    got = dict(zip(t["query_id"], t["ndcg"]))
    assert got["q1"] == pytest.approx(ev.ndcg_at_k([0, 2, 1], [1, 1, 1], 2))
    assert got["q2"] == pytest.approx(1.0)
    summ = ev.summarize(t, {"q1": ["Algebra"], "q2": ["Algebra", "Geometry"]}, ["Algebra", "Geometry", "Combinatorics"],
                        n_bootstrap=50)
    row = {g: m for g, m in zip(summ["group"], summ["mean"])}
    assert row["Overall"] == pytest.approx((got["q1"] + 1) / 2)
    assert row["Geometry"] == pytest.approx(1.0)
    assert math.isnan(row["Combinatorics"])
    with pytest.raises(ValueError, match="without a score"):
        ev.ndcg_table(scores.filter(pl.col("cand_id") != "a"), ratings)


def test_ndcg_table_candidate_missing_for_one_retriever_is_an_error():
    # r2 did not score candidate b (the best one): its nDCG must not be computed over {a, c} alone
    # (that would give 1.0: c, the best of what is left, is ranked first); r1 scored everything.
    ratings = pl.DataFrame({"query_id": ["q1"] * 3, "cand_id": ["a", "b", "c"], "position": [0, 1, 2],
                            "rating": [0.0, 2.0, 1.0]})
    scores = pl.DataFrame({"retriever": ["r1"] * 3 + ["r2"] * 2, "setting": ["s"] * 5, "query_id": ["q1"] * 5,
                           "cand_id": ["a", "b", "c", "a", "c"], "score": [3.0, 2.0, 1.0, 0.0, 1.0]})
    with pytest.raises(ValueError, match="without a score"):
        ev.ndcg_table(scores, ratings, k=1)
    dup = pl.concat([scores.filter(pl.col("retriever") == "r1"), scores.filter(pl.col("cand_id") == "a").head(1)])
    with pytest.raises(ValueError, match="scored twice"):
        ev.ndcg_table(dup, ratings, k=1)
    # complete scores: r1 ranks a (rating 0) first -> DCG@1 = 0
    t = ev.ndcg_table(scores.filter(pl.col("retriever") == "r1"), ratings, k=1)
    assert t["ndcg"].to_list() == [0.0]
