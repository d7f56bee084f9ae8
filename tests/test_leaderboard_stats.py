"""Bootstrap schemes against the shared interval files and scipy; the paired sign-flip test
against scipy.stats.permutation_test; Holm against a hand computation; letter displays."""
import itertools
import re

import numpy as np
import pytest
from scipy import stats as sps

from conftest import PUBLISHED, needs_published
from saber_lib.leaderboard import published as pub
from saber_lib.leaderboard import stats as st
from saber_lib.leaderboard.scopes import scope_masks
from saber_lib.metrics.resample import holm, sign_flip_bound


@pytest.fixture(scope="module")
def published():
    return pub.read_published_dir(PUBLISHED)


@needs_published
def test_authors_scheme_reproduces_the_shared_interval_files(published):
    systems = published.systems
    masks = scope_masks(systems[0].domains)
    tasks = list(published.confidence[systems[0].name])
    n_checked = 0
    for task in tasks:
        X = np.array([s.scores[task] for s in systems])
        for scope, m in masks.items():
            res = st.bootstrap_intervals(X[:, m], "authors", scope == "Overall", st.AUTHORS_RESAMPLES,
                                         seed=1, keys=(task, scope))
            for s, r in zip(systems, res):
                c = published.confidence[s.name][task][scope]
                assert abs(r["ci_low"] - c["low"]) < 0.002, (s.name, task, scope)
                assert abs(r["ci_high"] - c["high"]) < 0.002, (s.name, task, scope)
                assert abs(r["boot_mean"] - c["mean"]) < 0.002
                n_checked += 1
    assert n_checked == 5 * 3 * 6


@needs_published
def test_correct_scheme_is_the_ordinary_bootstrap_and_wider_per_domain(published):
    s = published.systems[0]
    masks = scope_masks(s.domains)
    v = s.scores["statement-full"]
    for scope in ("Geometry", "Overall"):
        x = v[masks[scope]]
        mine = st.bootstrap_interval(x, "correct", scope == "Overall", 20_000, seed=2, keys=(scope,))
        ref = sps.bootstrap((x,), np.mean, n_resamples=20_000, method="percentile",
                            rng=np.random.default_rng(5)).confidence_interval
        assert mine["n_draws"] == x.size and mine["mean"] == np.mean(x)
        assert abs(mine["ci_low"] - ref.low) < 1.5e-3 and abs(mine["ci_high"] - ref.high) < 1.5e-3
    # Geometry has 200 queries: 300 draws shrink the width by about sqrt(200/300)
    g = v[masks["Geometry"]]
    wc = st.bootstrap_interval(g, "correct", False, 10_000, seed=0)
    wa = st.bootstrap_interval(g, "authors", False, 10_000, seed=0)
    ratio = (wa["ci_high"] - wa["ci_low"]) / (wc["ci_high"] - wc["ci_low"])
    assert ratio == pytest.approx(np.sqrt(200 / 300), abs=0.04)


def test_draws_per_scheme_and_missing_values():
    assert st.n_draws("correct", True, 950, 1000) == 950
    assert st.n_draws("authors", True, 950, 1000) == 1000
    assert st.n_draws("authors", False, 200, 200) == 300
    with pytest.raises(ValueError):
        st.n_draws("other", True, 1, 1)
    r = st.bootstrap_interval([0.2, np.nan, 0.4, 0.6], "correct", True, 500, seed=0)
    assert r["n_queries"] == 3 and r["n_missing"] == 1 and r["mean"] == pytest.approx(0.4)
    assert 0.2 <= r["ci_low"] <= r["mean"] <= r["ci_high"] <= 0.6


def test_seeded():
    x = np.random.default_rng(0).random(100)
    a = st.bootstrap_interval(x, n_resamples=300, seed=4, keys=("a",))
    assert a == st.bootstrap_interval(x, n_resamples=300, seed=4, keys=("a",))
    assert a != st.bootstrap_interval(x, n_resamples=300, seed=5, keys=("a",))


def test_one_system_interval_does_not_depend_on_the_others():
    rng = np.random.default_rng(1)
    X = rng.random((3, 50))
    alone = st.bootstrap_intervals(X[:1], n_resamples=400, seed=3, keys=("t",))[0]
    together = st.bootstrap_intervals(X, n_resamples=400, seed=3, keys=("t",))[0]
    assert alone.keys() == together.keys()
    for k in alone:                          # equal up to BLAS rounding (matrix vs vector product)
        assert alone[k] == pytest.approx(together[k], rel=1e-12, abs=1e-15)


def _scipy_paired_p(x, y, R, seed):
    res = sps.permutation_test((x, y), lambda a, b, axis: np.mean(a - b, axis=axis), vectorized=True,
                               permutation_type="samples", n_resamples=R, alternative="two-sided",
                               rng=np.random.default_rng(seed))
    return res.pvalue


@needs_published
def test_sign_flip_against_scipy_permutation_test(published):
    task = "statement-full"
    X = np.array([s.scores[task] for s in published.systems])
    names = [s.name for s in published.systems]
    R = 10_000
    res = st.pairwise_tests(X, names, n_resamples=R, seed=0, keys=(task,))
    checked = 0
    for a, b, p, md in zip(res["a"], res["b"], res["p_value"], res["mean_diff"]):
        if {a, b} not in ({"bm25", "jaccard"}, {"bm25", "tf-idf-no-tok"}, {"jaccard", "tf-idf-no-tok"}):
            continue
        x, y = X[names.index(a)], X[names.index(b)]
        assert md == pytest.approx(np.mean(x - y), abs=1e-15)
        ref = _scipy_paired_p(x, y, R, seed=11)
        # two independent Monte-Carlo estimates: allow 4 standard errors of their difference
        se = np.sqrt(2 * max(ref, 1 / R) * (1 - ref) / R)
        assert abs(p - ref) < 4 * se + 1e-3, (a, b, p, ref)
        checked += 1
    assert checked == 3


def test_sign_flip_synthetic_and_missing():
    rng = np.random.default_rng(7)
    base = rng.random(200)
    X = np.vstack([base, base - 0.01 + rng.normal(0, 0.1, 200), base + 0.2])
    X[1, :20] = np.nan                       # system 1 did not score 20 queries
    res = st.pairwise_tests(X, ["s0", "s1", "s2"], n_resamples=5000, seed=0)
    i = res["a"].index("s0"), res["b"].index("s1")
    k = [j for j in range(3) if res["a"][j] == "s0" and res["b"][j] == "s1"][0]
    assert res["n_common"][k] == 180
    assert res["mean_diff"][k] == pytest.approx(np.mean(X[0, 20:] - X[1, 20:]))
    ref = _scipy_paired_p(X[0, 20:], X[1, 20:], 5000, seed=3)
    assert abs(res["p_value"][k] - ref) < 4 * np.sqrt(2 * max(ref, 2e-4) * (1 - ref) / 5000) + 1e-3
    k2 = [j for j in range(3) if res["a"][j] == "s0" and res["b"][j] == "s2"][0]
    # far beyond the Monte-Carlo floor 1/5001: Hoeffding's bound on the exact p-value, never 0
    d2 = X[0] - X[2]
    assert 0 < res["p_value"][k2] < 1 / 5001
    assert res["p_value"][k2] == pytest.approx(2 * np.exp(-d2.sum() ** 2 / (2 * (d2 ** 2).sum())))
    # paired bootstrap interval of the difference vs scipy.stats.bootstrap on the differences
    d = X[0, 20:] - X[1, 20:]
    ref_ci = sps.bootstrap((d,), np.mean, n_resamples=5000, method="percentile",
                           rng=np.random.default_rng(9)).confidence_interval
    assert abs(res["diff_low"][k] - ref_ci.low) < 2e-3 and abs(res["diff_high"][k] - ref_ci.high) < 2e-3


def test_identical_systems_give_p_one():
    x = np.random.default_rng(0).random(30)
    res = st.pairwise_tests(np.vstack([x, x]), ["a", "b"], n_resamples=100, seed=0)
    assert res["p_value"][0] == 1.0 and res["mean_diff"][0] == 0.0


def test_holm_by_hand():
    p = np.array([0.01, 0.04, 0.03, 0.005, np.nan])
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04 -> running max
    want = [0.03, 0.06, 0.06, 0.02, np.nan]
    np.testing.assert_allclose(holm(p), want, rtol=0, atol=1e-15)
    np.testing.assert_array_equal(holm([0.5, 0.9]), [1.0, 1.0])
    assert np.isnan(holm([np.nan])).all()


def test_compact_letters_by_hand():
    # A > B > C; only A and C differ: A "a", B "ab", C "b"
    L = st.compact_letters(["C", "A", "B"], [0.1, 0.3, 0.2], {frozenset({"A", "C"})})
    assert L == {"A": "a", "B": "ab", "C": "b"}
    assert st.compact_letters(["x", "y"], [1, 2], set()) == {"x": "a", "y": "a"}


def test_compact_letters_share_a_letter_iff_not_different():
    rng = np.random.default_rng(0)
    names = list("ABCDEFG")
    for _ in range(20):
        diff = {frozenset(p) for p in itertools.combinations(names, 2) if rng.random() < 0.4}
        L = st.compact_letters(names, rng.random(7), diff)
        for a, b in itertools.combinations(names, 2):
            shares = bool(set(L[a]) & set(L[b]))
            assert shares == (frozenset({a, b}) not in diff)


def _insert_absorb(names, different):
    """Piepho's insert-absorb, step by step (the reference the clique search must reproduce)."""
    groups = [frozenset(names)]
    for x, y in (tuple(p) for p in different):
        new = []
        for g in groups:
            new += [g - {x}, g - {y}] if x in g and y in g else [g]
        new = list(dict.fromkeys(new))
        groups = [g for g in new if g and not any(g < h for h in new)]
    return set(groups)


def test_compact_letters_groups_are_those_of_insert_absorb():
    """The letters' groups (one per letter) are exactly insert-absorb's on random difference sets,
    and a 50-system case shaped like a leaderboard (systems differ when far apart) is letters too."""
    rng = np.random.default_rng(5)
    names = [f"s{i}" for i in range(9)]
    for _ in range(30):
        diff = {frozenset(p) for p in itertools.combinations(names, 2) if rng.random() < rng.uniform(0.1, 0.8)}
        L = st.compact_letters(names, rng.random(9), diff)
        groups = {frozenset(n for n in names if t in L[n]) for t in set("".join(L.values()))}
        assert groups == _insert_absorb(names, diff)
    names = [f"m{i:02d}" for i in range(50)]
    means = np.sort(rng.random(50))[::-1]
    diff = {frozenset((a, b)) for (i, a), (j, b) in itertools.combinations(enumerate(names), 2)
            if abs(means[i] - means[j]) > 0.05}
    L = {n: set(re.findall(r"\[\d+\]|[a-z]", t)) for n, t in st.compact_letters(names, means, diff).items()}
    assert len(set().union(*L.values())) > 26          # letters run out: the later groups are [26], [27], ...
    for a, b in itertools.combinations(names, 2):
        assert bool(L[a] & L[b]) == (frozenset({a, b}) not in diff)


def test_sign_flip_bound_is_above_the_exact_p_value():
    rng = np.random.default_rng(4)
    signs = np.array(list(itertools.product([-1.0, 1.0], repeat=12)))      # all 4,096 sign vectors
    for _ in range(20):
        d = rng.normal(rng.uniform(-0.5, 0.5), 1.0, 12)
        exact = np.mean(np.abs(signs @ d) >= abs(d.sum()) - 1e-12)
        assert sign_flip_bound(d[None, :])[0] >= exact


def test_many_pairs_can_still_be_significant():
    # 60 systems with large, clear differences: 1,770 pairs, more than the Monte-Carlo draws
    # can resolve after Holm; the exact-tail bound lets the clear ones through
    rng = np.random.default_rng(0)
    X = np.clip(rng.random(500)[None, :] * 0.2 + np.arange(60)[:, None] * 0.01 + rng.normal(0, 0.02, (60, 500)), 0, 1)
    res = st.pairwise_tests(X, [f"s{i}" for i in range(60)], n_resamples=200, seed=0)
    far = [p for a, b, p in zip(res["a"], res["b"], res["p_adjusted"]) if abs(int(a[1:]) - int(b[1:])) >= 10]
    assert max(far) < 0.05
