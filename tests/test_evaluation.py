"""The metric kernels of saber_lib.metrics: nDCG (shapes, tie policies, the zero-ideal policy)
against hand computations and ir-measures, the resampler against scipy and closed forms, the seed
helper against its written definition."""
from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest
from scipy import stats

from saber_lib.metrics import ndcg, resample
from saber_lib.core import seeds
from saber_lib.metrics.ranking import ndcg_open


def test_ndcg_hand_computed():
    # ranking by score: c1 (rating 1), c0 (3), c2 (0); ideal 3, 1, 0
    rel, sc = [3, 1, 0], [0.5, 0.9, 0.1]
    dcg = (2 ** 1 - 1) / math.log2(2) + (2 ** 3 - 1) / math.log2(3)
    idcg = (2 ** 3 - 1) / math.log2(2) + (2 ** 1 - 1) / math.log2(3)
    assert ndcg.ndcg_at_k(rel, sc, 10) == pytest.approx(dcg / idcg, abs=1e-15)
    assert ndcg.ndcg_at_k(rel, sc, 1) == pytest.approx(1 / 7, abs=1e-15)
    order = ndcg.rankings([sc, [3, 2, 1]])
    m = ndcg.ndcg_matrix([rel, [0, 0, 5]], order, 10)
    assert m[0, 0] == pytest.approx(dcg / idcg) and m[0, 1] == pytest.approx(1.0)
    assert m[1, 1] == pytest.approx((2 ** 5 - 1) / math.log2(4) / (2 ** 5 - 1))


def test_zero_ideal_dcg_policy_is_zero_everywhere():
    """All ratings 0: every kernel gives ZERO_IDEAL_NDCG = 0.0 (trec_eval's convention), never NaN."""
    assert ndcg.ZERO_IDEAL_NDCG == 0.0
    z, sc = [0.0, 0.0, 0.0], [1.0, 1.0, 0.0]
    assert ndcg.ndcg_at_k(z, sc) == 0.0
    assert ndcg.expected_ndcg_at_k(z, sc) == 0.0
    assert ndcg.ndcg_tie_range(z, sc) == (0.0, 0.0)
    assert ndcg.ndcg_ranked([0, 0], z) == 0.0
    assert ndcg.ndcg_matrix([z], ndcg.rankings([sc]))[0, 0] == 0.0
    # the open-corpus table leaves such a query out of its means (a rule of that table, not the kernel)
    assert math.isnan(ndcg_open(["a", "b"], {"a": 0.0, "b": 0.0}))


def test_zero_ideal_matches_ir_measures():
    irm = pytest.importorskip("ir_measures")
    from ir_measures import nDCG

    qrels = [irm.Qrel("q", "a", 0), irm.Qrel("q", "b", 0), irm.Qrel("r", "a", 2), irm.Qrel("r", "b", 0)]
    run = [irm.ScoredDoc(q, d, s) for q in ("q", "r") for d, s in (("a", 1.0), ("b", 2.0))]
    ref = {m.query_id: m.value for m in irm.iter_calc([nDCG(gains={0: 0, 2: 3}) @ 10], qrels, run)}
    assert ref["q"] == ndcg.ndcg_at_k([0, 0], [1.0, 2.0]) == 0.0
    assert ref["r"] == pytest.approx(ndcg.ndcg_at_k([2, 0], [1.0, 2.0]))


def test_tie_policies_brute_force():
    """expected = mean over all orders of tied candidates; range = their min and max."""
    import itertools

    rel = np.array([3.0, 0.0, 2.0, 1.0, 4.0])
    sc = np.array([1.0, 1.0, 1.0, 2.0, 0.5])
    vals = []
    for perm in itertools.permutations([0, 1, 2]):      # the three tied candidates in every order
        ranked = [3] + list(perm) + [4]
        vals.append(ndcg.ndcg_ranked(rel[ranked], rel, 3))
    assert ndcg.ndcg_policy("expected")(rel, sc, 3) == pytest.approx(np.mean(vals), abs=1e-12)
    assert ndcg.ndcg_tie_range(rel, sc, 3) == pytest.approx((min(vals), max(vals)), abs=1e-12)
    assert ndcg.ndcg_policy("position")(rel, sc, 3) == pytest.approx(vals[0], abs=1e-15)
    with pytest.raises(ValueError, match="tie_policy"):
        ndcg.ndcg_policy("random")


def test_seed_helper_matches_its_definition():
    h = int.from_bytes(hashlib.sha256("q7".encode()).digest()[:8], "little") >> 1
    a = seeds.rng_for(3, "q7", 2, 1).random(4)
    b = np.random.default_rng([3, h, 2, 1]).random(4)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(seeds.rng_for(3, "q8", 2, 1).random(4), a)
    with pytest.raises(ValueError):
        seeds.rng_for(0, -1)


def test_bootstrap_ci_agrees_with_scipy_and_the_normal_interval():
    x = np.random.default_rng(1).normal(2.0, 1.0, size=400)
    m, lo, hi = resample.bootstrap_ci(x, n_resamples=4000, level=0.9, seed=0)
    ref = stats.bootstrap((x,), np.mean, n_resamples=4000, confidence_level=0.9, method="percentile",
                          rng=np.random.default_rng(5)).confidence_interval
    se = x.std(ddof=0) / math.sqrt(x.size)
    assert m == pytest.approx(x.mean())
    for ours, theirs, normal in ((lo, ref.low, m - 1.645 * se), (hi, ref.high, m + 1.645 * se)):
        assert ours == pytest.approx(theirs, abs=0.15 * se)
        assert ours == pytest.approx(normal, abs=0.15 * se)
    assert resample.bootstrap_ci([0.3, 0.3]) == (0.3, 0.3, 0.3)


def test_holm_hand_computed():
    p = [0.01, 0.04, np.nan, 0.03, 0.2]
    # sorted 0.01, 0.03, 0.04, 0.2 (m = 4): 0.04, 0.09, 0.09 (monotone), 0.2
    np.testing.assert_allclose(resample.holm(p), [0.04, 0.09, np.nan, 0.09, 0.2])


def test_two_level_variance_is_query_plus_judge():
    """Planted: point nDCG per query with variance 0.04, judge noise with variance 0.01 around it.
    The two-level resample variance is (0.04 + 0.01) / Q and never below the query-only one."""
    rng = np.random.default_rng(0)
    Q, D = 400, 300
    point = rng.normal(0.5, 0.2, size=(1, Q))
    noise = rng.normal(0.0, 0.1, size=(1, Q, D))
    noise -= noise.mean(axis=2, keepdims=True)
    two, qonly = resample.two_level_means(point, noise, 4000, np.random.default_rng(1))
    vq = point.var() / Q
    vj = noise.var(axis=2).mean() / Q
    assert qonly[:, 0].var() == pytest.approx(vq, rel=0.08)
    assert two[:, 0].var() == pytest.approx(vq + vj, rel=0.08)
    assert (vq + vj) / vq == pytest.approx(1.25, rel=0.05)


# ----------------------------------------------------------------------------- sign-flip test
def _flip_p(d, n_permutations=10_000, seed=0, exact=None):
    d = np.asarray(d, dtype=float)
    return resample.sign_flip_pvalues(d[None, :], [d.size], n_permutations, np.random.default_rng(seed),
                                      exact=exact)[0]


def test_exact_sign_flip_hand_enumerated():
    # n = 3, d = (1, 2, 3), |sum| = 6; the 8 sums: +-1 +-2 +-3 = 6, 4, 2, 0, 0, -2, -4, -6 -> 2 of 8 reach 6
    assert _flip_p([1, 2, 3]) == pytest.approx(2 / 8)
    # n = 3, d = (3, -1, 1), |sum| = 3: +-3 +-1 +-1 = 5, 3, 3, 1, -1, -3, -3, -5 -> 6 of 8 reach 3
    assert _flip_p([3, -1, 1]) == pytest.approx(6 / 8)
    # n = 4, d = (1, 1, 1, 1): only all + and all - reach |mean| 1
    assert _flip_p([1, 1, 1, 1]) == pytest.approx(2 / 16)
    # n = 4, d = (2, 1, 1, 0.5), sum 4.5: |sums| >= 4.5 for all+ / all- (4.5) and flipping only the 0.5
    # (3.5) is below; so 2 of 16
    assert _flip_p([2, 1, 1, 0.5]) == pytest.approx(2 / 16)
    # n = 4, d = (1, 1, 1, -1), sum 2: |sums| 4 (2 patterns), 2 (8 patterns), 0 (6 patterns) -> 10 of 16
    assert _flip_p([1, 1, 1, -1]) == pytest.approx(10 / 16)
    assert _flip_p([0, 0, 0]) == 1.0 and _flip_p([1, -1]) == 1.0


def test_exact_sign_flip_agrees_with_scipy_and_ignores_missing_queries():
    rng = np.random.default_rng(3)
    x, y = rng.random(9), rng.random(9) + 0.2
    ref = stats.permutation_test((x, y), lambda a, b, axis: np.mean(a - b, axis=axis), vectorized=True,
                                 permutation_type="samples", n_resamples=np.inf, alternative="two-sided")
    # 2**9 = 512 <= 1000 patterns: enumerated, like scipy's exact test; rng unused
    assert _flip_p(x - y, 1000) == pytest.approx(ref.pvalue, rel=1e-12)
    assert _flip_p(x - y, 1000, seed=1) == _flip_p(x - y, 1000, seed=2)
    # a second pair that misses 3 of the 12 queries: its p-value is its own 9 queries' exact one
    D = np.zeros((2, 12))
    D[0] = rng.normal(0.3, 1, 12)
    D[1, :9] = x - y
    p = resample.sign_flip_pvalues(D, np.array([12, 9]), 5000, np.random.default_rng(0))
    assert p[1] == pytest.approx(ref.pvalue, rel=1e-12)
    assert p[0] == pytest.approx(_flip_p(D[0], 5000, exact=True), rel=1e-12)
    assert np.isnan(resample.sign_flip_pvalues(np.zeros((1, 4)), np.array([0]), 100, np.random.default_rng(0))[0])


def test_monte_carlo_sign_flip_estimates_the_exact_p_value():
    d = np.random.default_rng(5).normal(0.25, 1.0, 14)
    exact = _flip_p(d, 100, exact=True)                # 16,384 patterns enumerated
    est = _flip_p(d, 4000, seed=7)                     # 2**14 > 4000: Monte Carlo
    assert abs(est - exact) < 4 * np.sqrt(exact * (1 - exact) / 4000) + 1 / 4001
    with pytest.raises(ValueError, match="too many"):
        _flip_p(np.ones(40), 10, exact=True)
