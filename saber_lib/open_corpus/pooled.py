"""Pooled judging: rate the pool with the benchmark's judge and tournament, grow the qrels, rescore.

The pool (:func:`pooling.pool_to_judge`) holds the (query, document) pairs in some run's top
``depth`` that the benchmark never rated. For every query with pooled documents,
:func:`judge_pool` plays a tournament (``judging.tournament.run_tournament``: same judge, same
schedule, seeded per query and round, judgments stored per round so a killed run resumes) over the
query's **rated benchmark candidates plus its pooled documents**, and fits Bradley-Terry strengths
``theta'`` over that enlarged set.

Same 0-5 scale as the benchmark. The benchmark's rating is the min-max rescaling of ``theta`` over
the query's benchmark candidates: the weakest candidate is 0, the strongest ``rating_top``. A pooled
document gets the same rescaling with the *benchmark candidates' anchors measured inside the
enlarged tournament*::

    rating(d) = clip(top * (theta'(d) - min_c theta'(c)) / (max_c theta'(c) - min_c theta'(c)), 0, top)

with ``c`` over the query's benchmark candidates. So a pooled document judged as strong as the
best benchmark candidate gets ``top``, one weaker than every candidate gets 0, and the
benchmark's own ratings are kept unchanged (the enlarged tournament only places the new documents
between the old anchors). ``info["anchor_spearman"]`` is the mean per-query Spearman correlation
between ``theta'`` and the benchmark ratings of the candidates: how well the enlarged tournament
reproduces the benchmark's order (1 = the same order).

:func:`grow_qrels` joins both into one table (``source``: ``benchmark`` | ``pool``) and
:func:`score_runs` rescores the runs against it.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl
from scipy import stats

from ..judging.tournament import corpus_docs, run_tournament
from .exclusion import exclusions
from ..metrics.ranking import per_query_metrics
from .pooling import pool_to_judge

QRELS_SCHEMA = {"query_id": pl.String, "cand_id": pl.String, "rating": pl.Float64, "source": pl.String}


@dataclass
class PoolJudging:
    qrels: object        # polars: query_id, cand_id, rating, source (benchmark | pool)
    pooled: object       # polars: query_id, cand_id, rating, theta (the pooled documents only)
    judgments: object    # polars: the enlarged tournaments' judgments (JUDGMENT_SCHEMA)
    per_round: object    # polars: round, judgments, queries
    info: dict = field(default_factory=dict)


def cap_pool(pool, max_per_query: int = 0):
    """The pool limited to ``max_per_query`` documents per query (best rank first, then the most
    systems, then the id); 0 keeps all."""
    if not max_per_query:
        return pool
    return (pool.sort("query_id", "best_rank", "n_systems", "cand_id", descending=[False, False, True, False])
            .group_by("query_id", maintain_order=True).head(max_per_query))


def pool_benchmark(ratings, pool):
    """The enlarged tournament's input (``query_id, cand_id, position, group``): per query with pooled
    documents, its rated benchmark candidates (group ``benchmark``, by benchmark position) followed by
    its pooled documents (group ``pool``, by best rank)."""
    by_q: dict[str, list[str]] = {}
    for q, c in pool.select("query_id", "cand_id").iter_rows():
        by_q.setdefault(str(q), []).append(str(c))
    order = "position" if "position" in ratings.columns else "cand_id"
    rated = ratings.filter(pl.col("query_id").is_in(list(by_q))).sort("query_id", order)
    bench_of: dict[str, list[str]] = {}
    for q, c in rated.select("query_id", "cand_id").iter_rows():
        bench_of.setdefault(str(q), []).append(str(c))
    rows = []
    for q, new in by_q.items():
        cands = [(c, "benchmark") for c in bench_of.get(q, [])] + [(c, "pool") for c in new]
        rows += [(q, c, i, g) for i, (c, g) in enumerate(cands)]
    return pl.DataFrame(rows, schema={"query_id": pl.String, "cand_id": pl.String, "position": pl.Int64,
                                      "group": pl.String}, orient="row")


def _anchor(theta: np.ndarray, is_bench: np.ndarray, top: float) -> np.ndarray:
    lo, hi = float(theta[is_bench].min()), float(theta[is_bench].max())
    if hi - lo <= 1e-12:   # the judge cannot tell the candidates apart: above them is top, below 0
        return np.where(theta > hi + 1e-12, top, np.where(theta < lo - 1e-12, 0.0, top / 2))
    return np.clip(top * (theta - lo) / (hi - lo), 0.0, top)


def _store_key(bench, judge_name: str, schedule: str, rounds: int, seed: int, alpha: float) -> str:
    blob = json.dumps({"ids": bench.select("query_id", "cand_id").rows(), "judge": judge_name,
                       "schedule": schedule, "rounds": rounds, "seed": seed, "alpha": alpha})
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def judge_pool(ratings, pool, corpus, judge, *, rounds: int = 20, schedule: str = "swiss", seed: int = 0,
               store_dir, alpha: float = 0.5, top: float = 5.0, max_per_query: int = 0) -> PoolJudging:
    """Rate the pooled documents with ``judge`` (the benchmark's) and return the grown qrels.

    ``ratings``: the tournament's ratings (``query_id, cand_id, rating`` [+ ``position``]);
    ``pool``: :func:`pooling.pool_to_judge` output; ``corpus``: ``doc_id, problem, solution``.
    ``store_dir``: where the rounds are kept; a sub-folder per (pool, judge, schedule, rounds, seed)
    is used and other sub-folders (an earlier pool) are removed. ``max_per_query`` caps the pooled
    documents per query (:func:`cap_pool`; the rest stay unrated).
    """
    pool = cap_pool(pool, max_per_query)
    base = ratings.select(pl.col("query_id").cast(pl.String), pl.col("cand_id").cast(pl.String),
                          pl.col("rating").cast(pl.Float64), pl.lit("benchmark").alias("source"))
    empty_pooled = pl.DataFrame(schema={"query_id": pl.String, "cand_id": pl.String,
                                        "rating": pl.Float64, "theta": pl.Float64})
    if pool.height == 0:
        return PoolJudging(base, empty_pooled, pl.DataFrame(), pl.DataFrame(
            schema={"round": pl.Int64, "judgments": pl.Int64, "queries": pl.Int64}),
            {"pooled": 0, "judge_calls": 0, "rounds": 0, "anchor_spearman": float("nan")})
    bench = pool_benchmark(ratings, pool)
    docs = corpus_docs(corpus, set(bench["query_id"]) | set(bench["cand_id"]))
    root = Path(store_dir)
    key = _store_key(bench, judge.name, schedule, rounds, seed, alpha)
    if root.exists():
        for old in root.iterdir():
            if old.name != key:
                shutil.rmtree(old) if old.is_dir() else old.unlink()
    res = run_tournament(bench, docs, judge, schedule=schedule, rounds=rounds, seed=seed,
                         store_dir=root / key, alpha=alpha, top=top)
    old = dict(((q, c), r) for q, c, r in base.select("query_id", "cand_id", "rating").iter_rows())
    pooled_rows, rhos = [], []
    for (q,), g in res.ratings.group_by("query_id", maintain_order=True):
        theta = g["theta"].to_numpy()
        is_bench = (g["group"] == "benchmark").to_numpy()
        rating = _anchor(theta, is_bench, top)
        ids = g["cand_id"].to_list()
        for c, t, r, b in zip(ids, theta, rating, is_bench):
            if not b:
                pooled_rows.append((q, c, float(r), float(t)))
        if is_bench.sum() >= 3:
            bench_r = [old[(q, c)] for c, b in zip(ids, is_bench) if b]
            rho = stats.spearmanr(theta[is_bench], bench_r).statistic
            if np.isfinite(rho):
                rhos.append(float(rho))
    pooled = pl.DataFrame(pooled_rows, schema=empty_pooled.schema, orient="row")
    qrels = pl.concat([base, pooled.select("query_id", "cand_id", "rating", pl.lit("pool").alias("source"))])
    per_round = (res.judgments.group_by("round").agg(pl.len().alias("judgments"),
                                                     pl.col("query_id").n_unique().alias("queries"))
                 .sort("round").with_columns(pl.col("round").cast(pl.Int64), pl.col("judgments").cast(pl.Int64),
                                             pl.col("queries").cast(pl.Int64)))
    info = {"pooled": pooled.height, "judge_calls": res.judge_calls, "judgments": res.judgments.height,
            "rounds": res.rounds_played, "queries": bench["query_id"].n_unique(),
            "anchor_spearman": float(np.mean(rhos)) if rhos else float("nan"), "store_key": key}
    return PoolJudging(qrels.sort("query_id", "cand_id"), pooled.sort("query_id", "cand_id"),
                       res.judgments, per_round, info)


def grow_qrels(ratings, pooled):
    """Benchmark ratings plus pooled ratings as one qrels table (``source`` says which)."""
    base = ratings.select(pl.col("query_id").cast(pl.String), pl.col("cand_id").cast(pl.String),
                          pl.col("rating").cast(pl.Float64), pl.lit("benchmark").alias("source"))
    new = pooled.select("query_id", "cand_id", "rating", pl.lit("pool").alias("source"))
    return pl.concat([base, new]).sort("query_id", "cand_id")


def score_runs(runs, qrels, *, ks=(1, 5, 10, 20, 100), cutoff: float = 3.0, ndcg_k: int = 10,
               dedup_log=None):
    """Per-query metrics (``track.run_open_corpus``'s ``per_query`` layout) of stored ``runs``
    against ``qrels`` (``query_id, cand_id, rating``); a query's duplicates are left out of its
    judgments as in the track."""
    qids = runs["query_id"].unique(maintain_order=True).to_list()
    excl = exclusions(qids, dedup_log)
    judged: dict[str, dict[str, float]] = {q: {} for q in qids}
    for q, c, r in qrels.select("query_id", "cand_id", "rating").iter_rows():
        if q in judged and c not in excl[q] and r is not None:
            judged[q][c] = float(r)
    rows = []
    for (s, rep), g in runs.sort("rank").group_by("system", "representation", maintain_order=True):
        lists = {q: [] for q in qids}
        for q, c in g.select("query_id", "cand_id").iter_rows():
            lists[q].append(c)
        for q, metric, k, value, jk in per_query_metrics(lists, judged, ks, cutoff, ndcg_k):
            rows.append((s, rep, q, metric, k, value, jk))
    return pl.DataFrame(rows, schema={"system": pl.Utf8, "representation": pl.Utf8, "query_id": pl.Utf8,
                                      "metric": pl.Utf8, "k": pl.Int64, "value": pl.Float64,
                                      "judged_at_k": pl.Float64}, orient="row")


def round_budget(runs, ratings, depths=(1, 5, 10, 20), rounds: int = 20, max_per_query: int = 0):
    """The pooled-judging budget: per pool depth, the documents to rate and the judgments a Swiss
    tournament over (rated candidates + pooled documents) needs per round (``n // 2`` pairs per
    query) and over ``rounds`` rounds."""
    n_rated = dict(ratings.group_by("query_id").len().iter_rows())
    out = []
    for d in depths:
        pool = cap_pool(pool_to_judge(runs, ratings, d), max_per_query)
        per_q = dict(pool.group_by("query_id").len().iter_rows())
        per_round = sum((n_rated.get(q, 0) + p) // 2 for q, p in per_q.items())
        out.append((int(d), pool.height, len(per_q), per_round, per_round * rounds))
    return pl.DataFrame(out, schema={"depth": pl.Int64, "pooled_docs": pl.Int64, "queries": pl.Int64,
                                     "judgments_per_round": pl.Int64, "judgments_total": pl.Int64}, orient="row")
