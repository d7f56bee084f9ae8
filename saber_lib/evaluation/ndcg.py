"""nDCG@k: the one kernel behind every nDCG the workbench reports (the benchmark's evaluation, the
rating-draw intervals, the stopping rule, the memorization probe and the open-corpus track).

For ratings ``rel`` (graded relevance >= 0) and a ranking ``pi`` (candidate indices, best first)::

    gain(r)  = 2^r - 1
    DCG@k    = sum_{i=1..min(k, len(pi))} gain(rel[pi(i)]) / log2(i + 1)
    IDCG@k   = the same sum over the ratings sorted descending (every rated candidate competes)
    nDCG@k   = DCG@k / IDCG@k

Zero ideal DCG (the one policy, :data:`ZERO_IDEAL_NDCG`): when every rating is 0 there is nothing
to gain, IDCG@k = 0 and nDCG@k is **0.0** (what trec_eval and ir-measures report for a query whose
judgments are all non-relevant). A table that wants such queries left out of its means selects
them out before averaging (the open-corpus track does, see :mod:`saber_lib.metrics.ranking`);
no kernel returns NaN.

Ties in the scores (:func:`ndcg_at_k`, :func:`rankings`): a stable sort, so tied candidates keep
candidate order (the ``position`` tie policy); :func:`expected_ndcg_at_k` is the exact mean over
all orders of tied candidates (the ``expected`` policy) and :func:`ndcg_tie_range` its extremes.

Shapes: one ranking (:func:`ndcg_at_k`, :func:`ndcg_ranked`) or a matrix of rating vectors
against a matrix of rankings (:func:`ndcg_matrix`).
"""
from __future__ import annotations

import numpy as np

#: nDCG@k of a query whose ideal DCG is 0 (all ratings 0): see the module docstring
ZERO_IDEAL_NDCG = 0.0
TIE_POLICIES = ("position", "expected")


def dcg_gains(ratings) -> np.ndarray:
    """Exponential gain 2^rel - 1."""
    return np.exp2(np.asarray(ratings, dtype=np.float64)) - 1.0


def discounts(m: int) -> np.ndarray:
    """``1 / log2(i + 1)`` for ranks ``i = 1..m``."""
    return 1.0 / np.log2(np.arange(2, m + 2, dtype=np.float64))


def checked(ratings, scores, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``ratings`` and ``scores`` as float64 vectors of one length, ``k >= 1``, no NaN, ratings >= 0."""
    rel = np.asarray(ratings, dtype=np.float64).ravel()
    s = np.asarray(scores, dtype=np.float64).ravel()
    if rel.shape != s.shape:
        raise ValueError(f"ratings ({rel.size}) and scores ({s.size}) differ in length")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if np.isnan(s).any() or np.isnan(rel).any():
        raise ValueError("ratings and scores must not contain NaN")
    if (rel < 0).any():
        raise ValueError("ratings must be >= 0")
    return rel, s


def ndcg_ranked(ranked_ratings, ratings, k: int = 10) -> float:
    """nDCG@k of one ranked list given the ratings of its entries in rank order (``ranked_ratings``,
    any length; an unrated entry counts 0) and all of the query's ratings (``ratings``: the ideal)."""
    ideal_r = np.sort(np.asarray(ratings, dtype=np.float64).ravel())[::-1][:k]
    got = np.asarray(ranked_ratings, dtype=np.float64).ravel()[:k]
    disc = discounts(max(ideal_r.size, got.size))
    ideal = float(dcg_gains(ideal_r) @ disc[: ideal_r.size])
    if ideal <= 0.0:
        return ZERO_IDEAL_NDCG
    return float(dcg_gains(got) @ disc[: got.size]) / ideal


def ndcg_at_k(ratings, scores, k: int = 10) -> float:
    """nDCG@k of one query: candidates ranked by descending ``scores`` (ties by candidate order)."""
    rel, s = checked(ratings, scores, k)
    if rel.size == 0:
        return ZERO_IDEAL_NDCG
    return ndcg_ranked(rel[np.argsort(-s, kind="stable")], rel, k)


def rankings(scores_matrix) -> np.ndarray:
    """Candidate indices by descending score per row, ties by candidate order (stable)."""
    return np.argsort(-np.asarray(scores_matrix, dtype=float), axis=1, kind="stable")


def ndcg_matrix(rel, order, k: int = 10) -> np.ndarray:
    """nDCG@k of every rating vector (rows of ``rel``, ``(D, n)``) under every ranking (rows of
    ``order``, ``(S, n)``, candidate indices best first). Returns ``(D, S)``."""
    rel = np.atleast_2d(np.asarray(rel, dtype=float))
    m = min(k, rel.shape[1])
    disc = discounts(m)
    gains = dcg_gains(rel)
    ideal = -np.sort(-gains, axis=1)[:, :m] @ disc
    dcg = gains[:, np.asarray(order)[:, :m]] @ disc  # (D, S)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(ideal[:, None] > 0, dcg / np.where(ideal > 0, ideal, 1.0)[:, None], ZERO_IDEAL_NDCG)


# ----------------------------------------------------------------------------- ties
# Sort the distinct scores descending; the candidates sharing a score form a block that fills a
# fixed run of ranks [s, s + m). Under a uniformly random order of the block every member is
# equally likely at each of those ranks, so the block contributes
#
#     E[DCG of block] = mean gain of the block x sum of the discounts of ranks in [s, s + m) that are <= k
#
# (ranks beyond k have discount 0, which handles a block straddling the cut-off). The extreme
# orders follow from the rearrangement inequality: the maximum puts the block's largest gains on
# its earliest ranks, the minimum its smallest. The ideal DCG does not depend on the order.
# Scores are tied when exactly equal (no tolerance); round them first if float noise matters.
def _tie_blocks(ratings, scores, k: int):
    rel, s = checked(ratings, scores, k)
    n = rel.size
    gains = dcg_gains(rel)
    disc = np.zeros(n)
    m = min(k, n)
    disc[:m] = discounts(m)
    ideal = float(np.sort(gains)[::-1] @ disc)
    order = np.argsort(-s, kind="stable")
    ss = s[order]
    starts = np.flatnonzero(np.r_[True, ss[1:] != ss[:-1]])
    ends = np.r_[starts[1:], n]
    return gains[order], disc, ideal, starts, ends


def expected_ndcg_at_k(ratings, scores, k: int = 10) -> float:
    """Exact mean of nDCG@k over all orders of tied candidates (each order equally likely)."""
    g, disc, ideal, starts, ends = _tie_blocks(ratings, scores, k)
    if ideal <= 0.0:
        return ZERO_IDEAL_NDCG
    csum_g = np.r_[0.0, np.cumsum(g)]
    csum_d = np.r_[0.0, np.cumsum(disc)]
    sizes = ends - starts
    block_mean_gain = (csum_g[ends] - csum_g[starts]) / sizes
    block_disc = csum_d[ends] - csum_d[starts]
    return float(block_mean_gain @ block_disc) / ideal


def ndcg_tie_range(ratings, scores, k: int = 10) -> tuple[float, float]:
    """(minimum, maximum) of nDCG@k over all orders of tied candidates."""
    g, disc, ideal, starts, ends = _tie_blocks(ratings, scores, k)
    if ideal <= 0.0:
        return ZERO_IDEAL_NDCG, ZERO_IDEAL_NDCG
    lo = hi = 0.0
    for a, b in zip(starts, ends):
        if disc[a] == 0.0:      # this block and all later ones lie beyond the cut-off
            break
        blk = np.sort(g[a:b])
        lo += float(blk @ disc[a:b])
        hi += float(blk[::-1] @ disc[a:b])
    return lo / ideal, hi / ideal


def tie_sensitivity(ratings, scores, k: int = 10) -> dict:
    """``expected``, ``min``, ``max`` nDCG@k over tie orders and ``spread`` = max - min
    (0 when no tie touches the top k)."""
    lo, hi = ndcg_tie_range(ratings, scores, k)
    return {"expected": expected_ndcg_at_k(ratings, scores, k), "min": lo, "max": hi, "spread": hi - lo}


def ndcg_policy(tie_policy: str):
    """The one-query nDCG function of a tie policy (``position`` | ``expected``)."""
    if tie_policy not in TIE_POLICIES:
        raise ValueError(f"tie_policy must be one of {TIE_POLICIES}, got {tie_policy!r}")
    return ndcg_at_k if tie_policy == "position" else expected_ndcg_at_k
