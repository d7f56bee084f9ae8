"""Open-corpus metrics of one ranked list against graded judgments (ratings 0..5).

For a query with ranked documents d_1, d_2, ... (duplicates of the query already removed), ratings
``r(d)`` (an unrated document counts as 0, as in TREC) and relevance cut-off ``c``
(relevant <=> r(d) >= c), with R the set of rated relevant documents:

    Hit@k    = 1 if some d_i with i <= k is relevant, else 0
    Recall@k = |{i <= k : d_i relevant}| / |R|
    RR@k     = 1 / (first i <= k with d_i relevant), 0 if none     (MRR@k = mean over queries)
    nDCG@k   = sum_{i<=k} (2^r(d_i) - 1) / log2(i + 1)  /  the same sum over the k highest ratings
               of the query's judgments

A query without any relevant judged document has no defined Hit/Recall/RR (NaN; such queries are
left out of the means and counted); nDCG is left out (NaN) for a query whose judgments are all 0
(the kernel, :func:`saber_lib.metrics.ndcg.ndcg_ranked`, scores such a query 0; this table
excludes it instead, as it excludes queries without a relevant document from the other metrics). These match trec_eval's
``success``, ``recall``, ``recip_rank`` (with ``rel`` = c) and ``ndcg_cut`` with gains 2^r - 1,
restricted to queries with a relevant document.
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence


from .ndcg import ndcg_ranked

METRICS = ("hit", "recall", "mrr", "ndcg")


def hit_at_k(ranked: Sequence[str], ratings: Mapping[str, float], k: int, cutoff: float) -> float:
    if not any(r >= cutoff for r in ratings.values()):
        return math.nan
    return float(any(ratings.get(d, 0.0) >= cutoff for d in ranked[:k]))


def recall_at_k(ranked: Sequence[str], ratings: Mapping[str, float], k: int, cutoff: float) -> float:
    n_rel = sum(1 for r in ratings.values() if r >= cutoff)
    if n_rel == 0:
        return math.nan
    return sum(1 for d in ranked[:k] if ratings.get(d, 0.0) >= cutoff) / n_rel


def rr_at_k(ranked: Sequence[str], ratings: Mapping[str, float], k: int, cutoff: float) -> float:
    if not any(r >= cutoff for r in ratings.values()):
        return math.nan
    for i, d in enumerate(ranked[:k], 1):
        if ratings.get(d, 0.0) >= cutoff:
            return 1.0 / i
    return 0.0


def ndcg_open(ranked: Sequence[str], ratings: Mapping[str, float], k: int = 10) -> float:
    if not any(float(r) > 0 for r in ratings.values()):
        return math.nan     # no positive judgment: left out of the means (module docstring)
    return ndcg_ranked([float(ratings.get(d, 0.0)) for d in ranked[:k]],
                       [float(r) for r in ratings.values()], k)


def judged_at_k(ranked: Sequence[str], ratings: Mapping[str, float], k: int) -> float:
    """Share of the top k that is rated (the denominator is k, so a short list is not rewarded)."""
    return sum(1 for d in ranked[:k] if d in ratings) / k


def metric_value(metric: str, ranked, ratings, k: int, cutoff: float) -> float:
    if metric == "hit":
        return hit_at_k(ranked, ratings, k, cutoff)
    if metric == "recall":
        return recall_at_k(ranked, ratings, k, cutoff)
    if metric == "mrr":
        return rr_at_k(ranked, ratings, k, cutoff)
    if metric == "ndcg":
        return ndcg_open(ranked, ratings, k)
    raise ValueError(f"unknown metric {metric!r}; known: {', '.join(METRICS)}")


def per_query_metrics(run: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, float]],
                      ks: Sequence[int] = (1, 5, 10, 20, 100), cutoff: float = 3.0,
                      ndcg_k: int = 10, mrr_ks: Sequence[int] | None = None) -> list[tuple]:
    """Rows (query_id, metric, k, value, judged_at_k) for every query of ``run`` (query -> ranked
    doc ids). ``qrels``: query -> {doc: rating}. Hit and Recall at every k of ``ks``, MRR at every k
    of ``mrr_ks`` (default ``ks``), nDCG at ``ndcg_k``."""
    out = []
    for q, ranked in run.items():
        rq = qrels.get(q, {})
        ranked = list(ranked)
        for metric, kk in ([("hit", k) for k in ks] + [("recall", k) for k in ks]
                           + [("mrr", k) for k in (mrr_ks or ks)] + [("ndcg", ndcg_k)]):
            out.append((q, metric, int(kk), metric_value(metric, ranked, rq, kk, cutoff),
                        judged_at_k(ranked, rq, kk)))
    return out
