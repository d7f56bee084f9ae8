"""Query-set stability of a system ranking: how far an order of systems measured on n queries can be
trusted.

Input: a systems x queries matrix of per-query scores (every system scored every query; the
callers drop a query any system left unscored).

* **Split-half agreement** (:func:`split_half`; Voorhees & Buckley's topic-set-size question):
  ``n_splits`` seeded random pairs of *disjoint* query sets of size n (a random permutation of the
  queries, its first n and its next n); the systems' mean on each half; Kendall's tau-b of the two
  orders (:func:`saber_lib.metrics.correlation.row_kendall`, scipy's ``kendalltau`` variant), its
  mean, median and 5th percentile over the splits. The *swap rate* is the share of (split, system
  pair) comparisons whose order the second half reverses (a tie on either side is no swap), overall
  and binned by the absolute difference of the pair's means on the first half (:data:`DIFF_EDGES`).
* **Discriminative power** (:func:`discriminative_power`; Sakai 2006): ``n_subsets`` seeded random
  query subsets of size n (without replacement; with n equal to all queries, the one subset); on
  each, every pair of systems is tested with the paired tests the leaderboard uses: the two-sided
  sign-flip randomization test (:func:`saber_lib.metrics.resample.sign_flip_pvalues`) and the
  shifted paired bootstrap (:func:`saber_lib.metrics.resample.paired_bootstrap_pvalues`); the share
  of pairs with p < alpha, raw and after Holm's adjustment over the subset's pairs, averaged over
  the subsets. The subsets of one n are tested together (one matrix of sign patterns, one of
  resample counts, shared by all of them).
* **Queries needed** (:func:`queries_needed`): the least n at which a split-half statistic reaches a
  target (e.g. median tau 0.9): interpolated in log n between the measured points that bracket it,
  or, when no measured n reaches it, extrapolated by the curve ``1 - tau = a * n^-b`` fitted by
  least squares in log space to the measured points with 0 < tau < 1 (``extrapolated`` says so);
  a count past ``HORIZON`` times the largest measured n is no answer (``n_needed`` None,
  ``extrapolated`` True): a nearly flat fit would name billions of queries.

Every draw comes from ``rng_for(seed, <name>, n)``: the same seed gives identical numbers, and the
numbers at one n do not depend on which other n are asked for.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from tqdm.auto import tqdm

from ..core.seeds import rng_for
from .correlation import row_kendall
from .resample import holm, pair_indices, paired_bootstrap_pvalues, sign_flip_pvalues

#: bin edges of the absolute difference of two systems' means (first half) for the binned swap rate
DIFF_EDGES = (0.0, 0.01, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, math.inf)
#: query counts tried by :func:`query_counts`, those up to its limit
LADDER = (1, 2, 3, 5, 10, 25, 50, 100, 200, 500, 1000, 2000, 5000, 10000)


def _matrix(X) -> np.ndarray:
    X = np.atleast_2d(np.asarray(X, dtype=np.float64))
    if X.ndim != 2:
        raise ValueError(f"scores must be systems x queries, got shape {X.shape}")
    if np.isnan(X).any():
        raise ValueError("scores contain NaN: keep the queries every system scored")
    return X


def query_counts(n_queries: int, limit: int | None = None) -> list[int]:
    """The query counts of :data:`LADDER` up to ``limit`` (default: half the queries, the largest
    split-half size), and ``limit`` itself."""
    top = n_queries // 2 if limit is None else min(int(limit), n_queries)
    if top < 1:
        return []
    return sorted({n for n in LADDER if n <= top} | {top})


def split_half(X, n: int, n_splits: int, seed: int = 0, edges: Sequence[float] = DIFF_EDGES,
               chunk: int = 500) -> dict:
    """Split-half statistics at query count ``n`` (module docstring): ``taus`` (one per split, NaN
    where a half's means are all equal), ``tau_mean``, ``tau_median``, ``tau_p5`` (over the defined
    taus), ``swap_rate``, ``n_splits``, and per bin of :data:`DIFF_EDGES` (``edges``) the
    comparisons ``bin_pairs`` and the swaps ``bin_swaps``."""
    X = _matrix(X)
    S, Q = X.shape
    if n < 1 or 2 * n > Q:
        raise ValueError(f"split-half at n={n} needs 2n <= {Q} queries")
    rng = rng_for(seed, "split-half", int(n))
    ia, ib = pair_indices(S)
    taus = np.empty(int(n_splits))
    edges = np.asarray(edges, dtype=np.float64)
    bin_pairs = np.zeros(edges.size - 1, dtype=np.int64)
    bin_swaps = np.zeros(edges.size - 1, dtype=np.int64)
    for s in range(0, int(n_splits), chunk):
        e = min(int(n_splits), s + chunk)
        order = np.argsort(rng.random((e - s, Q)), axis=1)       # one uniform permutation per split
        A = X[:, order[:, :n]].mean(axis=2).T                    # splits x systems
        B = X[:, order[:, n:2 * n]].mean(axis=2).T
        taus[s:e] = row_kendall(A, B)
        dA, dB = A[:, ia] - A[:, ib], B[:, ia] - B[:, ib]
        swapped = (dA * dB < 0).ravel()
        which = np.clip(np.searchsorted(edges, np.abs(dA).ravel(), side="right") - 1, 0, edges.size - 2)
        bin_pairs += np.bincount(which, minlength=edges.size - 1)
        bin_swaps += np.bincount(which, weights=swapped, minlength=edges.size - 1).astype(np.int64)
    ok = taus[np.isfinite(taus)]
    stat = (lambda f: float(f(ok))) if ok.size else (lambda f: math.nan)
    return {"taus": taus, "tau_mean": stat(np.mean), "tau_median": stat(np.median),
            "tau_p5": stat(lambda t: np.percentile(t, 5)), "n_splits": int(n_splits),
            "swap_rate": float(bin_swaps.sum() / bin_pairs.sum()) if bin_pairs.sum() else math.nan,
            "bin_pairs": bin_pairs, "bin_swaps": bin_swaps}


def discriminative_power(X, n: int, n_subsets: int, n_permutations: int, alpha: float = 0.05, seed: int = 0,
                         max_rows: int = 4000, progress: bool = False) -> dict:
    """Discriminative power at query count ``n`` (module docstring): ``randomization``,
    ``randomization_holm``, ``bootstrap``, ``bootstrap_holm`` (mean share of system pairs with p <
    ``alpha``), ``n_subsets`` (1 when ``n`` is every query), ``n_pairs``. ``n_permutations``: sign
    patterns of the randomization test and resamples of the bootstrap."""
    X = _matrix(X)
    S, Q = X.shape
    if not 1 <= n <= Q:
        raise ValueError(f"discriminative power at n={n} needs 1 <= n <= {Q} queries")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    ia, ib = pair_indices(S)
    P = ia.size
    out = {"n_pairs": int(P), "n_subsets": 0, "randomization": math.nan, "randomization_holm": math.nan,
           "bootstrap": math.nan, "bootstrap_holm": math.nan}
    if P == 0:
        return out
    m = 1 if n == Q else int(n_subsets)
    rng = rng_for(seed, "discriminative power subsets", int(n))
    subsets = (np.arange(Q)[None, :] if n == Q else np.argsort(rng.random((m, Q)), axis=1)[:, :n])
    D = X[ia] - X[ib]                                             # pairs x queries
    per = max(1, max_rows // P)                                   # subsets tested together
    r_flip, r_boot = rng_for(seed, "discriminative power sign-flip", int(n)), rng_for(seed, "discriminative power bootstrap", int(n))
    shares = {k: [] for k in ("randomization", "randomization_holm", "bootstrap", "bootstrap_holm")}
    for s in tqdm(range(0, m, per), desc=f"discriminative power n={n}", disable=not progress, leave=False):
        idx = subsets[s:s + per]
        Dk = D[:, idx].transpose(1, 0, 2).reshape(-1, n)           # (subsets x pairs) x n
        counts = np.full(Dk.shape[0], float(n))
        p_flip = sign_flip_pvalues(Dk, counts, n_permutations, r_flip).reshape(-1, P)
        p_boot = paired_bootstrap_pvalues(Dk, np.ones(Dk.shape, dtype=bool), n_permutations, r_boot).reshape(-1, P)
        for name, p in (("randomization", p_flip), ("bootstrap", p_boot)):
            shares[name] += list((p < alpha).mean(axis=1))
            shares[name + "_holm"] += [float((holm(row) < alpha).mean()) for row in p]
    out.update({k: float(np.mean(v)) for k, v in shares.items()}, n_subsets=m)
    return out


def fit_power_law(ns, taus) -> tuple[float, float] | None:
    """``(a, b)`` of ``1 - tau = a * n^-b`` fitted by least squares in log space to the points with
    0 < tau < 1 (None with fewer than two such points at different n)."""
    ns, taus = np.asarray(ns, dtype=np.float64), np.asarray(taus, dtype=np.float64)
    ok = np.isfinite(taus) & (taus > 0) & (taus < 1) & (ns > 0)
    if np.unique(ns[ok]).size < 2:
        return None
    slope, icpt = np.polyfit(np.log(ns[ok]), np.log(1.0 - taus[ok]), 1)
    return float(math.exp(icpt)), float(-slope)


HORIZON = 100   # the farthest extrapolation reported, in multiples of the largest measured query count


def queries_needed(ns, values, target: float) -> dict:
    """The least query count at which a split-half statistic (``values`` at ``ns``, ascending n)
    reaches ``target`` (module docstring): ``n_needed`` (None when the fit does not decrease, or
    when it reaches the target only past ``HORIZON`` times the largest measured n: then
    ``extrapolated`` is True), ``extrapolated``, and the fitted ``fit_a`` / ``fit_b``."""
    ns, v = np.asarray(ns, dtype=np.float64), np.asarray(values, dtype=np.float64)
    fit = fit_power_law(ns, v)
    out = {"target": float(target), "n_needed": None, "extrapolated": False,
           "fit_a": fit[0] if fit else None, "fit_b": fit[1] if fit else None}
    ok = np.isfinite(v)
    ns, v = ns[ok], v[ok]
    hit = np.flatnonzero(v >= target)
    if hit.size:
        j = int(hit[0])
        if j == 0:
            out["n_needed"] = float(ns[0])
        else:     # linear in log n between the last point below and the first at or above
            x0, x1, y0, y1 = math.log(ns[j - 1]), math.log(ns[j]), v[j - 1], v[j]
            out["n_needed"] = float(math.exp(x0 + (target - y0) * (x1 - x0) / (y1 - y0)))
        return out
    if fit and fit[1] > 0 and target < 1:
        n = float((fit[0] / (1.0 - target)) ** (1.0 / fit[1]))
        out.update(n_needed=n if ns.size and n <= HORIZON * float(ns.max()) else None, extrapolated=True)
    return out


def tau_at(ns, taus, n: float) -> dict:
    """The split-half tau at query count ``n``: measured when ``n`` is one of ``ns``, else from the
    fitted curve of :func:`fit_power_law` (``extrapolated``); ``tau`` None when there is no fit."""
    ns, taus = np.asarray(ns, dtype=np.float64), np.asarray(taus, dtype=np.float64)
    hit = np.flatnonzero((ns == n) & np.isfinite(taus))
    if hit.size:
        return {"n": float(n), "tau": float(taus[hit[0]]), "extrapolated": False}
    fit = fit_power_law(ns, taus)
    tau = None if fit is None else float(1.0 - fit[0] * float(n) ** (-fit[1]))
    return {"n": float(n), "tau": tau, "extrapolated": True}


def stability_rows(X, ns: Sequence[int], *, n_splits: int, n_subsets: int, n_permutations: int, alpha: float = 0.05,
                   seed: int = 0, progress: bool = False) -> tuple[list[dict], list[dict]]:
    """Per query count of ``ns``: the split-half statistics (where 2n fits the queries; NaN and
    ``n_splits`` 0 otherwise) and the discriminative power; and the binned swap rates. Returns
    ``(rows, bins)``: rows with ``n``, ``tau_mean``, ``tau_median``, ``tau_p5``, ``swap_rate``,
    ``discriminative_power`` (randomization) with ``_holm``, ``_bootstrap``, ``_bootstrap_holm``,
    ``n_systems``, ``n_queries``, ``n_splits``, ``n_subsets``; bins with ``n``, ``diff_low``,
    ``diff_high``, ``pairs``, ``swaps``, ``swap_rate``."""
    X = _matrix(X)
    S, Q = X.shape
    rows, bins = [], []
    for n in tqdm(sorted(set(int(v) for v in ns)), desc="query-set stability", disable=not progress, leave=False):
        row = {"n": n, "tau_mean": math.nan, "tau_median": math.nan, "tau_p5": math.nan, "swap_rate": math.nan,
               "n_splits": 0}
        if 2 * n <= Q and S >= 2:
            sh = split_half(X, n, n_splits, seed)
            row.update({k: sh[k] for k in ("tau_mean", "tau_median", "tau_p5", "swap_rate", "n_splits")})
            for lo, hi, pairs, swaps in zip(DIFF_EDGES[:-1], DIFF_EDGES[1:], sh["bin_pairs"], sh["bin_swaps"]):
                bins.append({"n": n, "diff_low": lo, "diff_high": hi, "pairs": int(pairs), "swaps": int(swaps),
                             "swap_rate": float(swaps / pairs) if pairs else math.nan})
        dp = discriminative_power(X, n, n_subsets, n_permutations, alpha, seed) if n <= Q else {}
        row.update(discriminative_power=dp.get("randomization", math.nan),
                   discriminative_power_holm=dp.get("randomization_holm", math.nan),
                   discriminative_power_bootstrap=dp.get("bootstrap", math.nan),
                   discriminative_power_bootstrap_holm=dp.get("bootstrap_holm", math.nan),
                   n_systems=S, n_queries=Q, n_subsets=dp.get("n_subsets", 0))
        rows.append(row)
    return rows, bins
