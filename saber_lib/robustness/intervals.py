"""nDCG@k under rating draws: the two-level bootstrap beside the query-only one, how much of its
variance and width the judge adds, and swap probabilities between retrievers (the draws come from
:mod:`saber_lib.judging.draws`).

Two-level nDCG bootstrap
------------------------
Let ``N[q, d]`` be retriever ``s``'s nDCG@k on query ``q`` under rating draw ``d`` (``d = 1..D``),
``P[q]`` its nDCG under the point ratings and ``m_q = mean_d N[q, d]``. The judge's noise on query
``q`` is ``E[q, d] = N[q, d] - m_q``. One two-level resample draws ``Q`` queries with replacement
and, for each drawn query, one rating draw uniformly, and averages ``P[q] + E[q, d]``; the
query-only resample averages ``P[q]`` over the same drawn queries. Intervals are percentile
intervals of the resample means (:func:`saber_lib.metrics.resample.two_level_means`).

Why the noise is centred on the point nDCG: a refit on redrawn judgments is pulled toward the
middle (fewer distinct comparisons, a flatter rating vector), so ``m_q`` varies less over queries
than ``P[q]``; averaging ``N`` itself would swap part of the query spread for that shrinkage and
give a two-level interval *narrower* than the query-only one. Centred, the variance of a
two-level resample mean is exactly::

    Var = var_query + var_judge,   var_query = var_q(P[q]) / Q,   var_judge = mean_q(v_q) / Q

with ``v_q = var_d N[q, d]`` (population variances), never below the query-only variance.
Reported: ``judge_variance_share = var_judge / Var`` (the judge's share of the variance) and
``width_added_by_judge = width_two_level - width_query_only`` (what the judge adds to the width;
about ``2 z (sqrt(Var) - sqrt(var_query))``, much less than the variance share times the width).
A noiseless judge has ``v_q = 0``: both are 0.

Swap probabilities: for each pair of retrievers, the share of draws in which their order differs
from the order of their point means; ``p_swap_judging`` uses joint rating draws only (draw ``d``
of every query, all queries kept), ``p_swap_two_level`` uses the two-level resamples (paired: the
same queries and draws for both retrievers).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl
from tqdm.auto import tqdm

from ..metrics.ndcg import ndcg_matrix, rankings
from ..metrics.resample import percentile_interval, two_level_means


def _progress(it, total, desc, show):
    return tqdm(it, total=total, desc=desc, leave=False) if show else it


@dataclass
class NdcgArrays:
    """nDCG of each retriever (rows ``systems``) per query: ``point[s, q]`` under the point ratings
    and ``draws[s, q, d]`` under each rating draw."""

    systems: list
    query_ids: list
    point: np.ndarray
    draws: np.ndarray


def ndcg_arrays(scores, ratings, draws, *, k: int = 10, setting: str | None = None,
                progress: bool = True) -> NdcgArrays:
    """The nDCG arrays of every (retriever, setting) over the rated queries.

    ``scores``: ``retriever, setting, query_id, cand_id, score``; ``ratings``: ``query_id, cand_id,
    rating`` (+ ``position``, the tie-break order, as in :func:`saber_lib.evaluate.tables.ndcg_table`);
    ``draws``: ``query_id, cand_id, draw, rating``. ``setting`` keeps one setting. Systems are
    ``(retriever, setting)`` tuples."""
    if setting is not None:
        scores = scores.filter(pl.col("setting") == setting)
    systems = scores.select("retriever", "setting").unique(maintain_order=True).rows()
    sidx = {s: i for i, s in enumerate(systems)}
    r = ratings.sort("query_id", "position") if "position" in ratings.columns else ratings.sort("query_id")
    cands = {q: g for (q,), g in r.select("query_id", "cand_id", "rating").group_by(["query_id"], maintain_order=True)}
    D = int(draws["draw"].max()) + 1 if draws.height else 0
    dr = {q: g for (q,), g in draws.group_by(["query_id"])}
    sc = {q: g for (q,), g in scores.group_by(["query_id"])}
    qids = list(cands)
    P = np.zeros((len(systems), len(qids)))
    N = np.zeros((len(systems), len(qids), D))
    for qi, q in _progress(list(enumerate(qids)), len(qids), "nDCG under draws", progress and len(qids) > 50):
        g = cands[q]
        cids = g["cand_id"].to_list()
        cpos = {c: i for i, c in enumerate(cids)}
        n = len(cids)
        S = np.full((len(systems), n), np.nan)
        gs = sc.get(q)
        if gs is None:
            raise ValueError(f"no scores for query {q!r}")
        for rname, sname, c, v in gs.select("retriever", "setting", "cand_id", "score").iter_rows():
            if c in cpos:
                S[sidx[(rname, sname)], cpos[c]] = v
        if np.isnan(S).any():
            s_bad, c_bad = np.argwhere(np.isnan(S))[0]
            raise ValueError(f"query {q!r}: candidate {cids[c_bad]!r} has no score from {systems[s_bad]}")
        gd = dr.get(q)
        if gd is None or gd.height != n * D:
            raise ValueError(f"query {q!r}: expected {n} x {D} rating draws")
        gd = gd.with_columns(pl.col("cand_id").replace_strict(cpos, return_dtype=pl.Int64).alias("_c"))
        R = np.zeros((D, n))
        R[gd["draw"].to_numpy(), gd["_c"].to_numpy()] = gd["rating"].to_numpy()
        order = rankings(S)
        P[:, qi] = ndcg_matrix(g["rating"].to_numpy()[None, :], order, k)[0]
        N[:, qi, :] = ndcg_matrix(R, order, k).T
    return NdcgArrays(systems, qids, P, N)


@dataclass
class NdcgUncertainty:
    summary: pl.DataFrame     # one row per system: means, both intervals, what the judge adds
    swaps: pl.DataFrame       # one row per pair of systems: swap probabilities
    arrays: NdcgArrays


def ndcg_two_level(scores, ratings, draws, *, k: int = 10, n_boot: int = 1000, level: float = 0.95,
                   seed: int = 0, setting: str | None = None, progress: bool = True) -> NdcgUncertainty:
    """The two-level bootstrap of mean nDCG@k beside the query-only one, what the judge adds to its
    variance and width, and swap probabilities (definitions in the module docstring). ``summary``
    columns: ``retriever, setting, n_queries, mean, lo_query, hi_query, width_query_only,
    lo_two_level, hi_two_level, width_two_level, var_query, var_judge, judge_variance_share,
    width_added_by_judge``; ``swaps``: ``setting_1, retriever_1,
    setting_2, retriever_2, p_swap_judging, p_swap_two_level``."""
    arr = ndcg_arrays(scores, ratings, draws, k=k, setting=setting, progress=progress)
    return ndcg_uncertainty_from_arrays(arr, n_boot=n_boot, level=level, seed=seed)


def ndcg_uncertainty_from_arrays(arr: NdcgArrays, *, n_boot: int = 1000, level: float = 0.95,
                                 seed: int = 0) -> NdcgUncertainty:
    """:func:`ndcg_two_level` on precomputed :class:`NdcgArrays`."""
    P, N = arr.point, arr.draws
    S, Q, D = N.shape
    if Q == 0 or D == 0:
        raise ValueError("no queries or no rating draws")
    rng = np.random.default_rng(seed)
    m_q = N.mean(axis=2)
    noise = N - m_q[:, :, None]
    flat = np.ptp(N, axis=2) <= 1e-12  # differences of float rounding (batched sums) are no spread
    noise[flat] = 0.0
    two, qonly = two_level_means(P, noise, n_boot, rng)  # (B, S)
    point_mean = P.mean(axis=1)
    var_query = P.var(axis=1) / Q
    v_q = N.var(axis=2)
    v_q[flat] = 0.0
    var_judge = v_q.mean(axis=1) / Q
    total = var_query + var_judge
    share = np.where(total > 0, var_judge / np.where(total > 0, total, 1.0), 0.0)
    rows = []
    for s, (rname, sname) in enumerate(arr.systems):
        lq, hq = percentile_interval(qonly[:, s], level)
        lt, ht = percentile_interval(two[:, s], level)
        rows.append((rname, sname, Q, float(point_mean[s]), float(lq), float(hq), float(hq - lq), float(lt),
                     float(ht), float(ht - lt), float(var_query[s]), float(var_judge[s]), float(share[s]),
                     float((ht - lt) - (hq - lq))))
    summary = pl.DataFrame(rows, schema=["retriever", "setting", "n_queries", "mean", "lo_query", "hi_query",
                                         "width_query_only", "lo_two_level", "hi_two_level", "width_two_level",
                                         "var_query", "var_judge", "judge_variance_share", "width_added_by_judge"],
                           orient="row")
    two, qonly = two.T, qonly.T
    joint = point_mean[:, None] + noise.mean(axis=1)  # (S, D): every query at draw d, centred as above
    srows = []
    for i in range(S):
        for j in range(i + 1, S):
            ref = np.sign(point_mean[i] - point_mean[j])
            pj = float(np.mean(np.sign(joint[i] - joint[j]) != ref))
            pt = float(np.mean(np.sign(two[i] - two[j]) != ref))
            srows.append((arr.systems[i][1], arr.systems[i][0], arr.systems[j][1], arr.systems[j][0], pj, pt))
    swaps = pl.DataFrame(srows, schema=["setting_1", "retriever_1", "setting_2", "retriever_2",
                                        "p_swap_judging", "p_swap_two_level"], orient="row")
    return NdcgUncertainty(summary, swaps, arr)
