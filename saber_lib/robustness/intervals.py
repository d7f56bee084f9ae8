"""nDCG@k under rating draws: the two-level bootstrap beside the query-only one, the split of the
interval width into a judging and a query part, and swap probabilities between retrievers
(the draws come from :mod:`saber_lib.robustness.uncertainty`).

Two-level nDCG bootstrap and the split of its width
---------------------------------------------------
Let ``N[q, d]`` be retriever ``s``'s nDCG@k on query ``q`` under rating draw ``d`` (``d = 1..D``)
and ``P[q]`` its nDCG under the point ratings. One two-level resample draws ``Q`` queries with
replacement and, for each drawn query, one rating draw uniformly, and averages ``N``; the
query-only resample (today's interval) averages ``P`` over the same drawn queries. Intervals are
percentile intervals of the resample means. With ``m_q = mean_d N[q, d]`` and
``v_q = var_d N[q, d]`` (population variances), the law of total variance gives the exact
variance of the two-level resample mean::

    Var = var_query + var_judge,   var_query = var_q(m_q) / Q,   var_judge = mean_q(v_q) / Q

``judge_share = var_judge / Var``; the two-level width is split in proportion:
``width_judge_part = judge_share * width_two_level`` and
``width_query_part = (1 - judge_share) * width_two_level``. A noiseless judge has ``v_q = 0``, so
its judging part is exactly zero.

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


def _progress(it, total, desc, show):
    return tqdm(it, total=total, desc=desc, leave=False) if show else it


def _discounts(k):
    return 1.0 / np.log2(np.arange(2, k + 2, dtype=float))


def ndcg_matrix(rel, order, k: int = 10) -> np.ndarray:
    """nDCG@k (exponential gain, as :func:`saber_lib.evaluate.ndcg_at_k`) for every rating vector
    (rows of ``rel``, shape ``(D, n)``) and every ranking (rows of ``order``, shape ``(S, n)``,
    candidate indices best first). Returns ``(D, S)``."""
    rel = np.atleast_2d(np.asarray(rel, dtype=float))
    m = min(k, rel.shape[1])
    disc = _discounts(m)
    gains = np.exp2(rel) - 1.0
    ideal = -np.sort(-gains, axis=1)[:, :m] @ disc
    dcg = gains[:, np.asarray(order)[:, :m]] @ disc  # (D, S)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(ideal[:, None] > 0, dcg / np.where(ideal > 0, ideal, 1.0)[:, None], 0.0)


def rankings(scores_matrix) -> np.ndarray:
    """Candidate indices by descending score per row, ties by candidate order (stable)."""
    return np.argsort(-np.asarray(scores_matrix, dtype=float), axis=1, kind="stable")


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
    rating`` (+ ``position``, the tie-break order, as in :func:`saber_lib.evaluate.ndcg_table`);
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
    summary: pl.DataFrame     # one row per system: means, both intervals, the width split
    swaps: pl.DataFrame       # one row per pair of systems: swap probabilities
    arrays: NdcgArrays


def ndcg_two_level(scores, ratings, draws, *, k: int = 10, n_boot: int = 1000, level: float = 0.95,
                   seed: int = 0, setting: str | None = None, progress: bool = True) -> NdcgUncertainty:
    """The two-level bootstrap of mean nDCG@k beside the query-only one, the split of the interval
    width into a judging and a query part, and swap probabilities (definitions in the module
    docstring). ``summary`` columns: ``retriever, setting, n_queries, mean, lo_query, hi_query,
    width_query_only, lo_two_level, hi_two_level, width_two_level, var_query, var_judge,
    judge_share, width_judge_part, width_query_part``; ``swaps``: ``setting_1, retriever_1,
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
    qi = rng.integers(0, Q, size=(n_boot, Q))
    di = rng.integers(0, D, size=(n_boot, Q))
    two = N[:, qi, di].mean(axis=2)          # (S, B)
    qonly = P[:, qi].mean(axis=2)            # (S, B)
    lo_q, hi_q = (1 - level) / 2, (1 + level) / 2
    point_mean = P.mean(axis=1)
    m_q = N.mean(axis=2)
    var_query = m_q.var(axis=1) / Q
    v_q = N.var(axis=2)
    v_q[np.ptp(N, axis=2) <= 1e-12] = 0.0  # differences of float rounding (batched sums) are no spread
    var_judge = v_q.mean(axis=1) / Q
    total = var_query + var_judge
    share = np.where(total > 0, var_judge / np.where(total > 0, total, 1.0), 0.0)
    rows = []
    for s, (rname, sname) in enumerate(arr.systems):
        lq, hq = np.quantile(qonly[s], [lo_q, hi_q])
        lt, ht = np.quantile(two[s], [lo_q, hi_q])
        w2 = float(ht - lt)
        rows.append((rname, sname, Q, float(point_mean[s]), float(lq), float(hq), float(hq - lq), float(lt),
                     float(ht), w2, float(var_query[s]), float(var_judge[s]), float(share[s]),
                     float(share[s] * w2), float((1 - share[s]) * w2)))
    summary = pl.DataFrame(rows, schema=["retriever", "setting", "n_queries", "mean", "lo_query", "hi_query",
                                         "width_query_only", "lo_two_level", "hi_two_level", "width_two_level",
                                         "var_query", "var_judge", "judge_share", "width_judge_part",
                                         "width_query_part"], orient="row")
    joint = N.mean(axis=1)  # (S, D): every query at draw d
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
