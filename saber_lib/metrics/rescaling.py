"""Rescaling robustness: does the order of systems survive another relevance scale or gain?

The benchmark's relevance is a rating on ``[0, top]`` (the tournament's Bradley-Terry strengths
min-max rescaled per query, ``tournament.rating_top`` = 5; the release: its scores on [0, 5]) and
nDCG@k uses the exponential gain ``2^rel - 1``. Neither choice is forced, and the exponential gain
is not invariant to the scale, so a scheme replays every system's ranking under another one:

    scheme "[lo,hi] gain [round]":   rel' = lo + (hi - lo) * rel / top      (linear map of [0, top])
                                     rel' -> nearest integer, halves up       (with ``round``)
                                     nDCG@k with gain(rel') = 2^rel' - 1 (exp) or rel' (linear)

e.g. ``"[0,3] exp round"`` (a 4-level graded scale), ``"[0,5] linear"``. With ``rank``
(``"[0,5] exp rank"``) the ratings are first replaced by their ranks within the query
(:func:`within_query_ranks`: the lowest-rated candidate 0, the highest ``top``, equal ratings sharing
their mean rank, evenly spaced in between), so that only each query's order of its candidates counts,
not the distances the Bradley-Terry strengths put between them. Without ``round`` a
linear-gain scheme equals every other linear-gain scheme (nDCG is a ratio of gains: a common factor
cancels), and ``"[0,top] exp"`` is the benchmark itself.

:func:`compare_systems` compares the systems' mean nDCG under a scheme with the reference (the
benchmark's own scale and gain): Pearson, Spearman and Kendall's tau-b (``scipy.stats``), the
system pairs whose order flips (a pair tied under either scheme is not a flip), the largest
reference gap between the two systems of a flipped pair, and the largest change of one system's
mean. nDCG itself is the one kernel, :mod:`saber_lib.metrics.ndcg` (its ``gain`` option).
"""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from ..core.scales import Scheme

COLUMNS = ("scheme", "pearson", "spearman", "kendall", "swapped_pairs", "system_pairs", "max_swapped_gap",
           "max_abs_delta")


def rescale_to_scheme(ratings, scheme: Scheme, top: float) -> np.ndarray:
    """Ratings on ``[0, top]`` mapped linearly onto the scheme's ``[lo, hi]``, rounded to the nearest
    integer (halves up) when the scheme says ``round``. A rating outside ``[0, top]`` is an error."""
    if not top > 0:
        raise ValueError(f"the rating scale's top must be > 0, got {top}")
    r = np.asarray(ratings, dtype=np.float64)
    eps = 1e-9 * top
    if r.size and (np.isnan(r).any() or r.min() < -eps or r.max() > top + eps):
        raise ValueError(f"ratings must lie in [0, {top:g}]: found [{np.nanmin(r):g}, {np.nanmax(r):g}]")
    out = scheme.lo + (scheme.hi - scheme.lo) * np.clip(r, 0.0, top) / top
    return np.floor(out + 0.5) if scheme.rounded else out


def within_query_ranks(ratings, query_ids, top: float) -> np.ndarray:
    """Each rating replaced by its rank among its query's ratings, spread evenly over ``[0, top]``:
    ascending rank ``r`` (0 = lowest; equal ratings share the mean of their ranks) becomes
    ``top * r / (n - 1)`` for a query of ``n`` candidates; a query with one candidate gets ``top``.
    ``query_ids`` gives each rating's query (same length)."""
    from scipy.stats import rankdata  # heavy, and needed by the rank scheme only

    r = np.asarray(ratings, dtype=np.float64)
    q = np.asarray(query_ids)
    if r.shape != q.shape:
        raise ValueError(f"{r.size} ratings for {q.size} query ids")
    out = np.empty_like(r)
    _, inverse = np.unique(q, return_inverse=True)
    for g in range(int(inverse.max()) + 1 if r.size else 0):
        idx = np.flatnonzero(inverse == g)
        n = idx.size
        out[idx] = top if n == 1 else top * (rankdata(r[idx], method="average") - 1.0) / (n - 1)
    return out


def scheme_ratings(ratings, query_ids, scheme: Scheme, top: float) -> np.ndarray:
    """The ratings a scheme scores with: :func:`within_query_ranks` first when the scheme says
    ``rank``, then :func:`rescale_to_scheme`."""
    r = np.asarray(ratings, dtype=np.float64)
    if scheme.by_rank:
        rescale_to_scheme(r, scheme, top)          # the range check on the ratings themselves
        r = within_query_ranks(r, query_ids, top)
    return rescale_to_scheme(r, scheme, top)


def _corr(fn, a: np.ndarray, b: np.ndarray) -> float:
    if a.size < 2 or np.all(a == a[0]) or np.all(b == b[0]):
        return math.nan
    res = fn(a, b)
    return float(getattr(res, "statistic", res[0]))


def compare_systems(reference: Mapping[str, float], other: Mapping[str, float]) -> dict:
    """How the systems' means under a scheme (``other``) relate to the reference means: ``pearson``,
    ``spearman``, ``kendall`` (tau-b; NaN with fewer than 2 systems or a constant side),
    ``swapped_pairs`` (pairs ordered one way by the reference and the other way under the scheme),
    ``system_pairs`` (n (n - 1) / 2 less the pairs with a mean that is NaN or infinite on either side:
    those are neither swapped nor kept, and the correlations are then NaN), ``max_swapped_gap``
    (largest reference difference within a swapped pair; 0 when none swaps) and ``max_abs_delta``
    (largest |other - reference| of a system; NaN when a mean is).
    Both mappings must name the same systems."""
    from scipy import stats  # heavy, and needed by the comparison only

    if set(reference) != set(other):
        raise ValueError(f"systems differ: {sorted(set(reference) ^ set(other))}")
    names = sorted(reference)
    a = np.array([reference[n] for n in names], dtype=np.float64)
    b = np.array([other[n] for n in names], dtype=np.float64)
    i, j = np.triu_indices(a.size, k=1)
    # a pair with a mean that is not a number (nDCG that could not be computed) is neither swapped nor
    # kept: it is left out of system_pairs, so it never reads as agreeing
    known = np.isfinite(a[i]) & np.isfinite(a[j]) & np.isfinite(b[i]) & np.isfinite(b[j])
    i, j = i[known], j[known]
    flipped = (a[i] - a[j]) * (b[i] - b[j]) < 0
    gaps = np.abs(a[i] - a[j])[flipped]
    both = np.isfinite(a) & np.isfinite(b)
    corr = {"pearson": _corr(stats.pearsonr, a, b), "spearman": _corr(stats.spearmanr, a, b),
            "kendall": _corr(stats.kendalltau, a, b)} if both.all() else \
        {"pearson": math.nan, "spearman": math.nan, "kendall": math.nan}
    return {**corr, "swapped_pairs": int(flipped.sum()),
            "system_pairs": int(i.size), "max_swapped_gap": float(gaps.max()) if gaps.size else 0.0,
            "max_abs_delta": float(np.abs(b - a).max()) if a.size else 0.0}
