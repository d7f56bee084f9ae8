"""TREC-style depth-k pooling: what to judge next so that every system's top k is rated.

The pool is the set of (query, document) pairs that appear in the top ``depth`` of at least one
system's ranking (any representation) and have no rating yet -- exactly those, each once. Rating
the pool with the benchmark's tournament and judge and adding the ratings makes judged@depth = 1
for every system run so far; a new system only adds its own unrated documents.
"""
from __future__ import annotations

import polars as pl


def pool_to_judge(runs, ratings, depth: int = 10):
    """Unrated (query, document) pairs from the union of top-``depth`` lists.

    ``runs``: polars frame ``system, representation, query_id, cand_id, rank`` (rank 1 = best);
    ``ratings``: frame with ``query_id, cand_id`` (the rated pairs). Returns ``query_id, cand_id,
    n_systems`` (how many (system, representation) runs put it in their top ``depth``) and
    ``best_rank``, sorted by query, best rank, document.
    """
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    top = runs.filter(pl.col("rank") <= depth)
    rated = ratings.select("query_id", "cand_id").unique()
    pool = (top.join(rated, on=["query_id", "cand_id"], how="anti")
            .group_by("query_id", "cand_id")
            .agg(pl.struct("system", "representation").n_unique().alias("n_systems"),
                 pl.col("rank").min().alias("best_rank")))
    return pool.sort("query_id", "best_rank", "cand_id").with_columns(
        pl.col("n_systems").cast(pl.Int64), pl.col("best_rank").cast(pl.Int64))


def pool_budget(runs, ratings, depths=(1, 5, 10, 20)):
    """Judgments needed per depth (the pooled-judging budget): ``depth, pairs, per_query``."""
    nq = max(1, runs["query_id"].n_unique())
    rows = [(int(d), pool_to_judge(runs, ratings, d).height) for d in depths]
    return pl.DataFrame([(d, n, n / nq) for d, n in rows],
                        schema={"depth": pl.Int64, "pairs": pl.Int64, "per_query": pl.Float64}, orient="row")
