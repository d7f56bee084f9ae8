"""Query-set stability (saber_lib.metrics.stability): split-half Kendall tau and swap rate against
scipy over every possible split of small hand cases, discriminative power against a hand-written
exact randomization test, the shifted bootstrap test, the fitted curve, and invariants."""
import itertools
import math

import numpy as np
import pytest
from scipy import stats

from saber_lib.metrics import stability as stb
from saber_lib.metrics.resample import paired_bootstrap_pvalues

# 3 systems x 4 queries, no ties between system means on any pair of queries
X3 = np.array([[0.9, 0.1, 0.5, 0.3],
               [0.2, 0.8, 0.45, 0.6],
               [0.4, 0.35, 0.1, 0.95]])


def every_split(X, n):
    """(tau, swaps, comparisons) of every ordered pair of disjoint halves of size n, by scipy."""
    Q = X.shape[1]
    out = []
    for a in itertools.combinations(range(Q), n):
        rest = [q for q in range(Q) if q not in a]
        for b in itertools.combinations(rest, n):
            ma, mb = X[:, list(a)].mean(axis=1), X[:, list(b)].mean(axis=1)
            tau = stats.kendalltau(ma, mb).statistic
            sw = sum((ma[i] - ma[j]) * (mb[i] - mb[j]) < 0 for i, j in itertools.combinations(range(len(ma)), 2))
            out.append((tau, sw, math.comb(len(ma), 2)))
    return out


def test_split_half_taus_are_scipy_taus_of_uniformly_drawn_splits():
    splits = every_split(X3, 2)
    possible = np.array([t for t, _, _ in splits])
    got = stb.split_half(X3, 2, 6000, seed=3)
    # every drawn tau is the scipy tau of one of the possible splits
    assert all(np.isclose(possible, t).any() for t in got["taus"])
    # the draws are uniform over the splits: the mean tau and the swap rate approach the exact averages
    assert got["tau_mean"] == pytest.approx(possible.mean(), abs=0.03)
    exact_swap = sum(s for _, s, _ in splits) / sum(c for _, _, c in splits)
    assert got["swap_rate"] == pytest.approx(exact_swap, abs=0.02)
    assert got["bin_pairs"].sum() == 6000 * 3 and got["bin_swaps"].sum() == round(got["swap_rate"] * 18000)
    assert got["tau_median"] == pytest.approx(np.median(got["taus"]))
    assert got["tau_p5"] == pytest.approx(np.percentile(got["taus"], 5))


def test_identical_halves_give_tau_one_and_no_swap():
    X = np.repeat(np.array([[0.1], [0.5], [0.3], [0.9]]), 20, axis=1)       # every query orders alike
    got = stb.split_half(X, 7, 500, seed=0)
    assert np.all(got["taus"] == 1.0) and got["tau_p5"] == 1.0 and got["swap_rate"] == 0.0


def test_same_seed_same_numbers_other_seed_other_draws():
    rng = np.random.default_rng(0)
    X = rng.random((6, 80))
    a, b = stb.stability_rows(X, [5, 20, 40, 80], n_splits=300, n_subsets=20, n_permutations=500, seed=11)
    a2, b2 = stb.stability_rows(X, [5, 20, 40, 80], n_splits=300, n_subsets=20, n_permutations=500, seed=11)
    assert a == a2 and b == b2
    c, _ = stb.stability_rows(X, [5, 20], n_splits=300, n_subsets=20, n_permutations=500, seed=12)
    assert c[0]["tau_mean"] != a[0]["tau_mean"]
    # the numbers at one n do not depend on the other n asked for
    d, _ = stb.stability_rows(X, [20], n_splits=300, n_subsets=20, n_permutations=500, seed=11)
    assert d[0] == a[1]
    # n = 80: no split half (2n > 80 queries), one subset (all queries)
    assert a[3]["n_splits"] == 0 and math.isnan(a[3]["tau_mean"]) and a[3]["n_subsets"] == 1


def exact_sign_flip(d):
    """Hand-written exact two-sided randomization test of mean difference 0."""
    obs = abs(np.mean(d))
    hits = [abs(np.mean(np.array(s) * d)) >= obs - 1e-12 for s in itertools.product((1, -1), repeat=len(d))]
    return sum(hits) / len(hits)


def holm_by_hand(p):
    order = np.argsort(p)
    adj, running = np.empty(len(p)), 0.0
    for k, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - k) * p[i]))
        adj[i] = running
    return adj


def test_discriminative_power_at_all_queries_is_the_share_of_pairs_an_exact_randomization_test_separates():
    X = np.array([[0.9, 0.8, 0.85, 0.95, 0.7, 0.9, 0.75, 0.8],
                  [0.1, 0.2, 0.15, 0.05, 0.3, 0.1, 0.25, 0.2],
                  [0.5, 0.9, 0.1, 0.6, 0.4, 0.7, 0.3, 0.2],
                  [0.52, 0.85, 0.12, 0.61, 0.45, 0.66, 0.28, 0.25]])
    p = [exact_sign_flip(X[i] - X[j]) for i, j in itertools.combinations(range(4), 2)]
    got = stb.discriminative_power(X, 8, 50, 1000, alpha=0.05)          # 2^8 <= 1000: exact
    assert got["n_subsets"] == 1 and got["n_pairs"] == 6
    assert got["randomization"] == pytest.approx(np.mean(np.array(p) < 0.05))
    assert got["randomization_holm"] == pytest.approx(np.mean(holm_by_hand(np.array(p)) < 0.05))
    assert 0 < got["randomization_holm"] < got["randomization"] < 1      # the example separates some pairs, not all


def test_discriminative_power_on_subsets_averages_the_exact_test_over_subsets_of_that_size():
    rng = np.random.default_rng(5)
    X = rng.random((3, 9)) + np.array([[0.3], [0.0], [0.05]])
    # every subset of 5 of the 9 queries with its exact test: the average share over random subsets approaches it
    shares = [np.mean([exact_sign_flip(X[i, list(s)] - X[j, list(s)]) < 0.1 for i, j in itertools.combinations(range(3), 2)])
              for s in itertools.combinations(range(9), 5)]
    got = stb.discriminative_power(X, 5, 2000, 64, alpha=0.1, seed=1)
    assert got["n_subsets"] == 2000
    assert got["randomization"] == pytest.approx(np.mean(shares), abs=0.03)


def test_shifted_bootstrap_p_values():
    rng = np.random.default_rng(0)
    D = np.vstack([np.full(30, 0.2), rng.normal(0, 1, 30), rng.normal(1.5, 1, 30)])
    p = paired_bootstrap_pvalues(D, np.ones(D.shape, dtype=bool), 2000, np.random.default_rng(1))
    assert p[0] == pytest.approx(1 / 2001)           # constant differences: no resample is as extreme
    assert p[2] < 0.01 and p[1] > 0.01
    # against the definition: share of centred resample means at least as far from 0 as the observed mean
    d = D[1]
    idx = np.random.default_rng(1).integers(0, 30, size=(2000, 30))
    want = (1 + (np.abs((d - d.mean())[idx].mean(axis=1)) >= abs(d.mean()) - 1e-12).sum()) / 2001
    p1 = paired_bootstrap_pvalues(D[1:2], np.ones((1, 30), dtype=bool), 2000, np.random.default_rng(1))
    assert p1[0] == pytest.approx(want)


def test_queries_needed_interpolates_or_extrapolates_the_fitted_curve():
    ns = np.array([5, 10, 25, 50, 100])
    taus = 1 - 2.0 * ns ** -0.5                    # 1 - tau = 2 n^-0.5: tau 0.9 at n = 400
    a, b = stb.fit_power_law(ns, taus)
    assert (a, b) == (pytest.approx(2.0), pytest.approx(0.5))
    got = stb.queries_needed(ns, taus, 0.9)
    assert got["extrapolated"] and got["n_needed"] == pytest.approx(400)
    ns2 = np.array([100, 300, 500, 1000])
    got2 = stb.queries_needed(ns2, 1 - 2.0 * ns2 ** -0.5, 0.9)
    assert not got2["extrapolated"] and 300 < got2["n_needed"] < 500
    assert stb.tau_at(ns, taus, 400) == {"n": 400.0, "tau": pytest.approx(0.9), "extrapolated": True}
    assert stb.tau_at(ns, taus, 25)["extrapolated"] is False
    assert stb.queries_needed([5, 10], [0.5, 0.4], 0.9)["n_needed"] is None     # a falling curve: no answer
    flat = 1 - 0.5 * ns ** -0.05                    # tau 0.9 only at n = 5^20, about 1e14 queries
    assert stb.queries_needed(ns, flat, 0.9) == {"target": 0.9, "n_needed": None, "extrapolated": True,
                                                 "fit_a": pytest.approx(0.5), "fit_b": pytest.approx(0.05)}
    assert stb.queries_needed(ns, 1 - 2.0 * ns ** -0.4, 0.9)["n_needed"] == pytest.approx(20 ** 2.5)  # 1,789 <= 100 x 100
    assert stb.queries_needed(ns, 1 - 2.0 * ns ** -0.3, 0.9)["n_needed"] is None  # 21,715 > 100 x 100


def test_query_counts_and_bad_input():
    assert stb.query_counts(1000) == [1, 2, 3, 5, 10, 25, 50, 100, 200, 500]
    assert stb.query_counts(13) == [1, 2, 3, 5, 6]
    with pytest.raises(ValueError, match="NaN"):
        stb.split_half(np.array([[0.1, np.nan, 0.2, 0.3]]), 1, 10)
    with pytest.raises(ValueError, match="2n <= 4"):
        stb.split_half(X3, 3, 10)
