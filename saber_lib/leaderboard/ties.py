"""nDCG@k when the retriever's scores tie: exact expectation, minimum and maximum over tie orders.

Same nDCG@k as :func:`saber_lib.evaluate.ndcg_at_k` (gain 2^rel - 1, discount 1/log2(rank + 1),
ideal DCG over all candidates), but instead of breaking ties by candidate position the
candidates with equal scores are taken in every order.

Closed form. Sort the distinct scores descending; the candidates sharing a score form a block
that fills a fixed run of ranks [s, s + m). Under a uniformly random order of the block every
member is equally likely at each of those ranks, so the block contributes

    E[DCG of block] = mean gain of the block x sum of the discounts of ranks in [s, s + m) that are <= k

(ranks beyond k have discount 0, which handles a block straddling the cut-off). The extreme
orders follow from the rearrangement inequality: the maximum puts the block's largest gains on
its earliest ranks, the minimum its smallest. The ideal DCG does not depend on the order.

Scores are tied when exactly equal (no tolerance); round them first if float noise matters.
"""
from __future__ import annotations

import numpy as np


def _prepare(ratings, scores, k: int):
    rel = np.asarray(ratings, dtype=np.float64).ravel()
    s = np.asarray(scores, dtype=np.float64).ravel()
    if rel.shape != s.shape:
        raise ValueError(f"ratings ({rel.size}) and scores ({s.size}) differ in length")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if np.isnan(rel).any() or np.isnan(s).any():
        raise ValueError("ratings and scores must not contain NaN")
    if (rel < 0).any():
        raise ValueError("ratings must be >= 0")
    n = rel.size
    gains = np.exp2(rel) - 1.0
    disc = np.zeros(n)
    m = min(k, n)
    disc[:m] = 1.0 / np.log2(np.arange(2, m + 2, dtype=np.float64))
    ideal = float(np.sort(gains)[::-1] @ disc)
    order = np.argsort(-s, kind="stable")
    ss = s[order]
    # block boundaries in the sorted list: a new block starts where the score changes
    starts = np.flatnonzero(np.r_[True, ss[1:] != ss[:-1]])
    ends = np.r_[starts[1:], n]
    return gains[order], disc, ideal, starts, ends


def expected_ndcg_at_k(ratings, scores, k: int = 10) -> float:
    """Exact mean of nDCG@k over all orders of tied candidates (each order equally likely)."""
    g, disc, ideal, starts, ends = _prepare(ratings, scores, k)
    if ideal <= 0.0:
        return 0.0
    csum_g = np.r_[0.0, np.cumsum(g)]
    csum_d = np.r_[0.0, np.cumsum(disc)]
    sizes = ends - starts
    block_mean_gain = (csum_g[ends] - csum_g[starts]) / sizes
    block_disc = csum_d[ends] - csum_d[starts]
    return float(block_mean_gain @ block_disc) / ideal


def ndcg_tie_range(ratings, scores, k: int = 10) -> tuple[float, float]:
    """(minimum, maximum) of nDCG@k over all orders of tied candidates."""
    g, disc, ideal, starts, ends = _prepare(ratings, scores, k)
    if ideal <= 0.0:
        return 0.0, 0.0
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
