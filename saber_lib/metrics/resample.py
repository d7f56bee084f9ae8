"""The one resampler: bootstrap over queries (one sample or many systems sharing the draws; means of
per-query values or, :func:`bootstrap_ratios`, pooled means over the pairs the queries hold; any
statistic of resampled items, :func:`bootstrap_statistic`, e.g. a correlation across systems), the
two-level bootstrap (queries, then a rating draw), paired differences with their bootstrap
interval, sign-flip test (exact or Monte Carlo) and shifted-bootstrap test, and Holm's adjustment.

A resample draws ``m`` of ``n`` items with replacement (``Generator.integers``); several systems
scored on the same items share the draws, so one system's interval is a matrix product and pairs
are compared on the same resamples. Intervals are percentile intervals (``numpy.percentile``,
linear interpolation). Generators come from :func:`saber_lib.core.seeds.rng_for`.
"""
from __future__ import annotations

import numpy as np
from tqdm.auto import tqdm


# ----------------------------------------------------------------------------- query bootstrap
def resample_indices(n: int, n_draws: int, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Resamples x ``n_draws`` item indices drawn uniformly with replacement from ``0 .. n-1``."""
    return rng.integers(0, n, size=(int(n_resamples), int(n_draws)))


def resample_counts(n: int, n_draws: int, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Resamples x n matrix: how often each of ``n`` items is drawn in each resample of
    ``n_draws`` draws with replacement (:func:`resample_indices` counted with ``numpy.bincount``)."""
    idx = resample_indices(n, n_draws, n_resamples, rng) + (np.arange(int(n_resamples)) * n)[:, None]
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


def bootstrap_statistic(n: int, statistic, n_resamples: int, rng: np.random.Generator,
                        chunk: int = 1000) -> np.ndarray:
    """Resampled values of ``statistic`` over ``n`` items drawn ``n`` times with replacement (the
    ordinary bootstrap of any statistic, e.g. a correlation across systems resampled by system).

    ``statistic`` maps a resamples x n matrix of item indices (:func:`resample_indices`) to one
    value per resample, or to resamples x k values; the result stacks the chunks in draw order.
    """
    if n < 1:
        raise ValueError("bootstrap of an empty sample")
    parts = []
    for s in range(0, int(n_resamples), chunk):
        e = min(int(n_resamples), s + chunk)
        parts.append(np.asarray(statistic(resample_indices(n, n, e - s, rng)), dtype=np.float64))
    return np.concatenate(parts, axis=0)


def bootstrap_ratios(sums, counts, n_resamples: int, rng: np.random.Generator, chunk: int = 1000) -> np.ndarray:
    """Resampled ratios ``sum(sums) / sum(counts)`` over items drawn with replacement: the cluster
    bootstrap of a mean over units grouped in items (pairs grouped by query: ``sums`` the per-query
    sums of pair scores, ``counts`` the pairs per query; each resample draws as many queries as
    there are, and its mean is over every pair of the drawn queries).

    ``sums`` / ``counts``: one sample (1-d) or systems x items sharing the draws (the result is then
    resamples x systems). A resample whose drawn items hold no unit gives NaN.
    """
    S, C = np.asarray(sums, dtype=np.float64), np.asarray(counts, dtype=np.float64)
    if S.shape != C.shape:
        raise ValueError(f"sums {S.shape} and counts {C.shape} differ in shape")
    one = S.ndim == 1
    S2, C2 = (S[None, :], C[None, :]) if one else (S, C)
    n = S2.shape[1]
    if n == 0:
        raise ValueError("bootstrap of an empty sample")
    out = np.empty((int(n_resamples), S2.shape[0]))
    ST, CT = S2.T.copy(), C2.T.copy()
    for s in range(0, out.shape[0], chunk):
        e = min(out.shape[0], s + chunk)
        W = resample_counts(n, n, e - s, rng)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[s:e] = (W @ ST) / (W @ CT)
    return out[:, 0] if one else out


def percentile_interval(boots, level: float = 0.95, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The ``(1 - level) / 2`` and ``(1 + level) / 2`` percentiles of resampled statistics."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    a = (1.0 - level) / 2.0
    q = np.percentile(boots, [100 * a, 100 * (1 - a)], axis=axis)
    return q[0], q[1]


def bootstrap_ci(values, n_resamples: int = 1000, level: float = 0.95, seed: int = 0):
    """(mean, low, high): the mean of ``values`` and its percentile-bootstrap interval over
    ``n_resamples`` resamples of ``len(values)`` entries (generator ``default_rng(seed)``).
    One value, or all values equal, gives (v, v, v)."""
    x = np.asarray(values, dtype=np.float64).ravel()
    if x.size == 0:
        raise ValueError("bootstrap_ci needs at least one value")
    if np.isnan(x).any():
        raise ValueError("bootstrap_ci: values contain NaN")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    mean = float(x.mean())
    if x.size == 1 or np.all(x == x[0]):
        return mean, mean, mean
    lo, hi = percentile_interval(bootstrap_means(x, x.size, n_resamples, np.random.default_rng(seed)), level)
    return mean, float(lo), float(hi)


# ----------------------------------------------------------------------------- two-level bootstrap
def two_level_means(point, noise, n_resamples: int, rng: np.random.Generator):
    """Two-level resample means of several systems: draw ``Q`` queries with replacement, then for
    every drawn query one of its ``D`` judge draws uniformly.

    ``point``: systems x queries (the statistic under the point ratings); ``noise``: systems x
    queries x draws, the deviation of each draw from its query's mean over draws (so it averages 0
    per query). A resample's value is the mean of ``point[q] + noise[q, d]`` over its drawn pairs;
    the query-only resample the mean of ``point[q]`` over the same queries. Returns
    ``(two_level, query_only)``, both resamples x systems. Centring the judge noise on the point
    statistic keeps the two-level variance ``var_q(point) / Q + mean_q(var_d noise) / Q``, never
    below the query-only one (the draws' own mean is pulled toward the middle by the refit)."""
    P = np.asarray(point, dtype=float)
    E = np.asarray(noise, dtype=float)
    S, Q, D = E.shape
    qi = resample_indices(Q, Q, n_resamples, rng)
    di = resample_indices(D, Q, n_resamples, rng)
    qonly = P[:, qi].mean(axis=2)
    two = qonly + E[:, qi, di].mean(axis=2)
    return two.T, qonly.T


# ----------------------------------------------------------------------------- paired
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


def sign_flip_exact(n_queries: int, n_permutations: int) -> bool:
    """Whether :func:`sign_flip_pvalues` enumerates every sign pattern of ``n_queries`` columns by
    default (there are no more of them than ``n_permutations``) rather than drawing at random."""
    return int(n_queries) < 63 and 2 ** int(n_queries) <= int(n_permutations)


def sign_flip_pvalues(D: np.ndarray, n: np.ndarray, n_permutations: int, rng: np.random.Generator,
                      chunk: int = 1000, progress: bool = False, exact: bool | None = None) -> np.ndarray:
    """Two-sided paired randomization test of mean difference 0, for many pairs at once.

    ``D``: pairs x queries of differences (0 where a pair has no common query), ``n``: the
    number of common queries per pair. Under the null each difference's sign is a fair coin; one
    matrix of sign patterns (patterns x queries) is shared by all pairs, so the whole test is a
    few matrix products. A pattern whose statistic equals the observed one up to rounding counts
    as "as extreme".

    * Exact (``exact=True``; by default when the ``2**Q`` patterns of the ``Q`` query columns are
      no more than ``n_permutations``): every pattern is enumerated and the p-value is the share
      of patterns at least as extreme, the observed one included. A column where a pair has no
      common query (difference 0) multiplies every count by 2, so the share is the exact p-value
      over that pair's own ``2**n`` patterns. ``rng`` is not used.
    * Monte Carlo (otherwise): ``n_permutations`` random patterns drawn from ``rng``; the p-value
      is (1 + #{|mean*| >= |mean|}) / (1 + permutations), which never reaches 0 but cannot go
      below 1 / (1 + permutations): with many pairs Holm's adjustment would then reject nothing
      (1,225 pairs need p < 4e-5). So the reported p-value is the smaller of the Monte-Carlo one
      and :func:`sign_flip_bound`, a deterministic upper bound of the exact p-value (it only wins
      far in the tail, where the Monte-Carlo estimate is at its floor).

    Pairs without a common query get NaN.
    """
    D = np.atleast_2d(np.asarray(D, dtype=np.float64))
    n = np.atleast_1d(np.asarray(n, dtype=np.float64))
    R, Q = int(n_permutations), D.shape[1]
    if exact is None:
        exact = sign_flip_exact(Q, R)
    elif exact and Q > 30:
        raise ValueError(f"exact sign-flip test over {Q} queries: 2**{Q} sign patterns are too many to enumerate")
    with np.errstate(invalid="ignore", divide="ignore"):
        obs = np.abs(D.sum(axis=1)) / n
    thr = obs - 1e-12 * np.maximum(1.0, obs)
    count = np.zeros(D.shape[0], dtype=np.int64)
    total = 2 ** Q if exact else R
    DT = D.T.copy()
    bits = np.arange(Q, dtype=np.int64)
    for s in tqdm(range(0, total, chunk), desc="sign-flip patterns", unit="chunk", disable=not progress,
                  leave=False):
        e = min(total, s + chunk)
        if exact:   # pattern k: bit j of k is the sign of column j
            signs = ((np.arange(s, e, dtype=np.int64)[:, None] >> bits) & 1).astype(np.float64) * 2.0 - 1.0
        else:
            signs = rng.integers(0, 2, size=(e - s, Q)).astype(np.float64) * 2.0 - 1.0
        with np.errstate(invalid="ignore", divide="ignore"):
            stat = np.abs(signs @ DT) / n
        count += (stat >= thr).sum(axis=0)
    if exact:
        p = count / float(total)
    else:
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
    resample counts (:func:`resample_counts`), so each group is one matrix product.
    """
    P = D.shape[0]
    lo, hi = np.full(P, np.nan), np.full(P, np.nan)
    patterns: dict[bytes, list[int]] = {}
    for i in range(P):
        patterns.setdefault(np.packbits(both[i]).tobytes(), []).append(i)
    for rows in patterns.values():
        cols = np.flatnonzero(both[rows[0]])
        if cols.size == 0:
            continue
        boots = bootstrap_means(D[np.ix_(rows, cols)], cols.size, n_resamples, rng, chunk)
        lo[rows], hi[rows] = percentile_interval(boots, level)
    return lo, hi


def paired_bootstrap_pvalues(D: np.ndarray, both: np.ndarray, n_resamples: int, rng: np.random.Generator,
                             chunk: int = 1000) -> np.ndarray:
    """Two-sided paired bootstrap test of mean difference 0 for each pair (row of ``D``), the shifted
    bootstrap: a pair's differences on its common queries are centred on their mean (the null holds
    for them), resampled with :func:`bootstrap_means`, and p = (1 + #{|mean*| >= |mean|}) /
    (1 + resamples). Pairs sharing the same common queries share the resamples, as in
    :func:`paired_bootstrap_intervals`. Pairs without a common query get NaN; a pair with one common
    query gets 1 (its centred difference is 0: there is no spread to test against)."""
    D = np.atleast_2d(np.asarray(D, dtype=np.float64))
    both = np.atleast_2d(np.asarray(both, dtype=bool))
    p = np.full(D.shape[0], np.nan)
    patterns: dict[bytes, list[int]] = {}
    for i in range(D.shape[0]):
        patterns.setdefault(np.packbits(both[i]).tobytes(), []).append(i)
    for rows in patterns.values():
        cols = np.flatnonzero(both[rows[0]])
        if cols.size == 0:
            continue
        if cols.size == 1:
            p[rows] = 1.0
            continue
        V = D[np.ix_(rows, cols)]
        obs = V.mean(axis=1)
        boots = bootstrap_means(V - obs[:, None], cols.size, n_resamples, rng, chunk)
        thr = np.abs(obs) - 1e-12 * np.maximum(1.0, np.abs(obs))
        p[rows] = (1.0 + (np.abs(boots) >= thr).sum(axis=0)) / (1.0 + int(n_resamples))
    return p


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
