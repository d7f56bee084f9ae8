"""Bootstrap intervals, the paired sign-flip test, Holm's adjustment and compact letter displays.

Interval schemes (percentile bootstrap, 95% by default, quantiles by ``numpy.percentile``'s
linear interpolation):

``correct``
    Overall: resample the n scored queries n times with replacement. Per domain: resample the
    domain's n scored queries n times. This is the ordinary nonparametric bootstrap of a mean.
``authors``
    What the authors' published confidence files hold: 10,000 resamples; per domain 300 draws
    from the domain's scored queries whatever the domain's size (Geometry has 200 queries, so
    its interval is too narrow; Algebra 254, ...); overall, as many draws as the result file has
    queries, *scored or not* (1,000), from the scored ones. With every query scored (the shared
    files) the overall interval is the correct one; with missing queries it is too narrow.
    The authors drew with Python's ``random``; here the draws are numpy's, so intervals agree
    within resampling noise (about 1e-4), not bit for bit.

Every random quantity takes an explicit seed; the stream for one (system, task, scope) is
derived from the seed and the names (:func:`rng_for`), so adding a system changes no other
system's numbers.
"""
from __future__ import annotations

import math
import zlib
from typing import Sequence

import numpy as np
from tqdm.auto import tqdm

AUTHORS_RESAMPLES = 10_000
AUTHORS_DOMAIN_DRAWS = 300
SCHEMES = ("correct", "authors")


def rng_for(seed: int, *keys: str) -> np.random.Generator:
    """A generator seeded by ``seed`` and stable hashes (crc32) of ``keys``."""
    return np.random.default_rng([int(seed), *[zlib.crc32(str(k).encode()) for k in keys]])


# ----------------------------------------------------------------------------- one-sample bootstrap
def resample_counts(n: int, n_draws: int, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Resamples x n matrix: how often each of ``n`` items is drawn in each resample of
    ``n_draws`` draws with replacement (uniform draws counted with ``numpy.bincount``)."""
    idx = rng.integers(0, n, size=(int(n_resamples), int(n_draws))) + (np.arange(int(n_resamples)) * n)[:, None]
    return np.bincount(idx.ravel(), minlength=int(n_resamples) * n).reshape(int(n_resamples), n).astype(np.float64)


def bootstrap_means(values, n_draws: int, n_resamples: int, rng: np.random.Generator,
                    chunk: int = 1000) -> np.ndarray:
    """Resample means of ``n_draws`` values drawn with replacement from ``values``.

    ``values`` is one sample (1-d) or several samples of the same size (systems x items): the
    same draws are applied to every row, so the result is resamples (x systems).
    """
    v = np.asarray(values, dtype=np.float64)
    one = v.ndim == 1
    V = v[None, :] if one else v
    n = V.shape[1]
    if n == 0:
        raise ValueError("bootstrap of an empty sample")
    out = np.empty((int(n_resamples), V.shape[0]))
    VT = V.T.copy()
    for s in range(0, out.shape[0], chunk):
        e = min(out.shape[0], s + chunk)
        out[s:e] = (resample_counts(n, n_draws, e - s, rng) @ VT) / n_draws
    return out[:, 0] if one else out


def n_draws(scheme: str, scope_is_overall: bool, n_scored: int, n_total: int) -> int:
    """Draws per resample under ``scheme`` (see the module docstring)."""
    if scheme == "correct":
        return n_scored
    if scheme == "authors":
        return n_total if scope_is_overall else AUTHORS_DOMAIN_DRAWS
    raise ValueError(f"unknown ci scheme {scheme!r} (expected one of {SCHEMES})")


def bootstrap_interval(values, scheme: str = "correct", overall: bool = True, n_resamples: int | None = None,
                       seed: int = 0, keys: Sequence[str] = (), level: float = 0.95) -> dict:
    """Mean and percentile-bootstrap interval of the scored (non-NaN) entries of ``values``.

    ``values`` is the scope's whole array (NaN = not scored): its length is the ``n_total`` the
    ``authors`` scheme draws overall. ``overall`` says whether the scope is ``Overall`` (else a
    domain). Returns ``mean``, ``ci_low``, ``ci_high``, ``boot_mean`` (mean of the resample
    means), ``n_queries`` (scored), ``n_missing``, ``n_draws``.
    """
    return bootstrap_intervals(np.asarray(values, dtype=np.float64)[None, :], scheme, overall, n_resamples,
                               seed, keys, level)[0]


def bootstrap_intervals(X, scheme: str = "correct", overall: bool = True, n_resamples: int | None = None,
                        seed: int = 0, keys: Sequence[str] = (), level: float = 0.95) -> list[dict]:
    """:func:`bootstrap_interval` for every row (system) of ``X`` (systems x the scope's queries).

    Systems that scored the same queries share the resampled queries (one matrix product per
    group); the stream of a group depends on the seed, ``keys`` and the set of its queries only,
    so one system's interval does not depend on which other systems are ranked.
    """
    X = np.atleast_2d(np.asarray(X, dtype=np.float64))
    n_res = int(n_resamples or AUTHORS_RESAMPLES)
    a = (1.0 - level) / 2.0
    out: list[dict] = [{} for _ in range(X.shape[0])]
    ok = ~np.isnan(X)
    groups: dict[bytes, list[int]] = {}
    for i in range(X.shape[0]):
        groups.setdefault(np.packbits(ok[i]).tobytes(), []).append(i)
    for pattern, rows in groups.items():
        cols = np.flatnonzero(ok[rows[0]])
        base = {"n_queries": int(cols.size), "n_missing": int(X.shape[1] - cols.size)}
        if cols.size == 0:
            for i in rows:
                out[i] = {**base, "mean": math.nan, "ci_low": math.nan, "ci_high": math.nan,
                          "boot_mean": math.nan, "n_draws": 0}
            continue
        m = n_draws(scheme, overall, cols.size, X.shape[1])
        full = cols.size == X.shape[1]
        rng = rng_for(seed, scheme, *keys, *(() if full else (zlib.crc32(pattern),)))
        V = X[np.ix_(rows, cols)]
        boots = bootstrap_means(V, m, n_res, rng)
        q = np.percentile(boots, [100 * a, 100 * (1 - a)], axis=0)
        for j, i in enumerate(rows):
            out[i] = {**base, "mean": float(np.mean(V[j])), "ci_low": float(q[0, j]), "ci_high": float(q[1, j]),
                      "boot_mean": float(boots[:, j].mean()), "n_draws": int(m)}
    return out


# ----------------------------------------------------------------------------- paired tests
def pair_indices(n_systems: int) -> tuple[np.ndarray, np.ndarray]:
    """All unordered pairs (a < b) of ``n_systems`` systems."""
    a, b = np.triu_indices(n_systems, k=1)
    return a.astype(np.int64), b.astype(np.int64)


def paired_differences(X: np.ndarray, a: np.ndarray, b: np.ndarray):
    """Per-pair differences on the queries both systems scored.

    ``X``: systems x queries (NaN = not scored). Returns ``D`` (pairs x queries, 0 where either
    is missing), ``both`` (the mask) and ``n`` (queries both scored, per pair).
    """
    X = np.asarray(X, dtype=np.float64)
    both = ~np.isnan(X[a]) & ~np.isnan(X[b])
    D = np.where(both, np.nan_to_num(X[a]) - np.nan_to_num(X[b]), 0.0)
    return D, both, both.sum(axis=1)


def sign_flip_pvalues(D: np.ndarray, n: np.ndarray, n_permutations: int, rng: np.random.Generator,
                      chunk: int = 1000, progress: bool = False) -> np.ndarray:
    """Two-sided paired randomization test of mean difference 0, for many pairs at once.

    ``D``: pairs x queries of differences (0 where a pair has no common query), ``n``: the
    number of common queries per pair. Under the null each difference's sign is a fair coin; one
    matrix of random signs (permutations x queries) is shared by all pairs, so the whole test
    is a few matrix products. The Monte-Carlo p-value is (1 + #{|mean*| >= |mean|}) /
    (1 + permutations), which never reaches 0 but cannot go below 1 / (1 + permutations): with
    many pairs Holm's adjustment would then reject nothing (1,225 pairs need p < 4e-5). So the
    reported p-value is the smaller of the Monte-Carlo one and :func:`sign_flip_bound`, a
    deterministic upper bound of the exact randomization p-value (it only wins far in the tail,
    where the Monte-Carlo estimate is at its floor). Pairs without a common query get NaN.
    """
    D = np.asarray(D, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        obs = np.abs(D.sum(axis=1)) / n
    # a resampled statistic equal to the observed one up to rounding counts as "as extreme"
    thr = obs - 1e-12 * np.maximum(1.0, obs)
    count = np.zeros(D.shape[0], dtype=np.int64)
    R, Q = int(n_permutations), D.shape[1]
    DT = D.T.copy()

    for s in tqdm(range(0, R, chunk), desc="sign-flip draws", unit="chunk", disable=not progress, leave=False):
        e = min(R, s + chunk)
        signs = rng.integers(0, 2, size=(e - s, Q)).astype(np.float64) * 2.0 - 1.0
        with np.errstate(invalid="ignore", divide="ignore"):
            stat = np.abs(signs @ DT) / n
        count += (stat >= thr).sum(axis=0)
    p = np.minimum((1.0 + count) / (1.0 + R), sign_flip_bound(D))
    p[n == 0] = np.nan
    return p


def sign_flip_bound(D: np.ndarray) -> np.ndarray:
    """Hoeffding's bound on the exact two-sided sign-flip p-value of each row of differences.

    With random signs s_i, S = sum s_i d_i is a sum of independent terms bounded by |d_i|, so
    P(|S| >= |s|) <= 2 exp(-s^2 / (2 sum d_i^2)) (Hoeffding). The bound is capped at 1.
    """
    D = np.atleast_2d(np.asarray(D, dtype=np.float64))
    s = D.sum(axis=1)
    v = (D * D).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        b = np.where(v > 0, 2.0 * np.exp(-(s * s) / (2.0 * v)), 1.0)
    return np.minimum(1.0, b)


def paired_bootstrap_intervals(D: np.ndarray, both: np.ndarray, n_resamples: int, rng: np.random.Generator,
                               level: float = 0.95, chunk: int = 1000) -> tuple[np.ndarray, np.ndarray]:
    """Percentile-bootstrap interval of each pair's mean difference (resampling its common queries).

    Pairs that share the same set of common queries (usually all of them) share one matrix of
    resample counts (:func:`resample_counts`), so each group is one
    matrix product.
    """
    P = D.shape[0]
    lo, hi = np.full(P, np.nan), np.full(P, np.nan)
    a = (1.0 - level) / 2.0
    patterns: dict[bytes, list[int]] = {}
    for i in range(P):
        patterns.setdefault(np.packbits(both[i]).tobytes(), []).append(i)
    for rows in patterns.values():
        cols = np.flatnonzero(both[rows[0]])
        m = cols.size
        if m == 0:
            continue
        Dg = D[np.ix_(rows, cols)].T.copy()              # m x pairs
        boots = np.empty((int(n_resamples), len(rows)))
        for s in range(0, int(n_resamples), chunk):
            e = min(int(n_resamples), s + chunk)
            boots[s:e] = (resample_counts(m, m, e - s, rng) @ Dg) / m
        q = np.percentile(boots, [100 * a, 100 * (1 - a)], axis=0)
        lo[rows], hi[rows] = q[0], q[1]
    return lo, hi


def holm(pvalues) -> np.ndarray:
    """Holm's step-down adjusted p-values (NaN entries are left out and stay NaN)."""
    p = np.asarray(pvalues, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(~np.isnan(p))
    m = ok.size
    if m == 0:
        return out
    order = ok[np.argsort(p[ok], kind="stable")]
    adj = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out[order] = adj
    return out


def pairwise_tests(X: np.ndarray, names: Sequence[str], n_resamples: int = 10_000, seed: int = 0,
                   keys: Sequence[str] = (), level: float = 0.95, progress: bool = False) -> dict:
    """Every pair of systems (rows of ``X``): mean difference a - b on the queries both scored,
    sign-flip p-value, Holm-adjusted p-value over all pairs, paired bootstrap interval.

    Returns a dict of equal-length lists/arrays: ``a``, ``b``, ``n_common``, ``mean_diff``,
    ``diff_low``, ``diff_high``, ``p_value``, ``p_adjusted``.
    """
    X = np.asarray(X, dtype=np.float64)
    ia, ib = pair_indices(X.shape[0])
    D, both, n = paired_differences(X, ia, ib)
    with np.errstate(invalid="ignore", divide="ignore"):
        md = D.sum(axis=1) / n
    p = sign_flip_pvalues(D, n, n_resamples, rng_for(seed, "sign-flip", *keys), progress=progress)
    lo, hi = paired_bootstrap_intervals(D, both, n_resamples, rng_for(seed, "paired-bootstrap", *keys), level)
    return {"a": [names[i] for i in ia], "b": [names[i] for i in ib], "n_common": n.astype(np.int64),
            "mean_diff": md, "diff_low": lo, "diff_high": hi, "p_value": p, "p_adjusted": holm(p)}


# ----------------------------------------------------------------------------- letters
def compact_letters(names: Sequence[str], means: Sequence[float], different: set[frozenset]) -> dict[str, str]:
    """Compact letter display: systems sharing a letter are not significantly different.

    ``different`` holds the significantly different pairs (as frozensets of two names). Built by
    the insert-absorb procedure (Piepho 2004): start with one group of all systems; for each
    significant pair split every group holding both into two (one without each member); drop
    groups contained in another. Then two systems share a letter exactly when they are not
    significantly different. Letters go to groups in order of their best mean ("a" = best).
    """
    names = list(names)
    groups: list[frozenset] = [frozenset(names)]
    for pair in different:
        x, y = tuple(pair)
        new = []
        for g in groups:
            if x in g and y in g:
                new += [g - {x}, g - {y}]
            else:
                new.append(g)
        new = list(dict.fromkeys(new))
        groups = [g for g in new if g and not any(g < h for h in new)]
    mean = dict(zip(names, means))
    rank = {n: i for i, n in enumerate(sorted(names, key=lambda n: -mean[n]))}
    groups.sort(key=lambda g: sorted(rank[n] for n in g))
    letters = "abcdefghijklmnopqrstuvwxyz"
    out = {n: "" for n in names}
    for i, g in enumerate(groups):
        tag = letters[i] if i < 26 else f"[{i}]"
        for n in sorted(g, key=rank.get):
            out[n] += tag
    return out
