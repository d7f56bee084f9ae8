"""Ratings with uncertainty beyond the tournament: the qrels sidecar (per rated candidate, its
rating's standard error, the judgments it saw, the judge and the fingerprint of the judge's prompt,
:func:`saber_lib.judging.judges.judge_prompt_hash`).

The rating draws themselves are :mod:`saber_lib.judging.draws` (the tournament stage draws them);
the two-level nDCG bootstrap, the split of its width and swap probabilities live in
:mod:`.intervals`.
"""
from __future__ import annotations

import polars as pl

from ..judging.draws import rating_se


# ============================================================================ qrels sidecar
def qrels_sidecar(ratings, draws=None, judgments=None, *, judge_id: str, prompt_hash: str | None = None
                  ) -> pl.DataFrame:
    """One row per rated candidate: ``query_id, cand_id, rating, rating_se, judgments_seen, judge,
    prompt_hash`` (sorted by ids, like the BEIR qrels).

    ``rating_se`` comes from ``draws`` (null without draws); ``judgments_seen`` counts the
    non-failed judgments the candidate took part in, from ``judgments`` when given, else the
    ratings' ``n_judged`` column."""
    base = ratings.select("query_id", "cand_id", "rating")
    if draws is not None:
        base = base.join(rating_se(draws).select("query_id", "cand_id", "rating_se"),
                         on=["query_id", "cand_id"], how="left")
    else:
        base = base.with_columns(pl.lit(None, dtype=pl.Float64).alias("rating_se"))
    if judgments is not None:
        ok = judgments.filter(pl.col("outcome") != "failure")
        seen = pl.concat([ok.select("query_id", pl.col("a").alias("cand_id")),
                          ok.select("query_id", pl.col("b").alias("cand_id"))]).group_by(
            "query_id", "cand_id").agg(pl.len().cast(pl.Int64).alias("judgments_seen"))
        base = base.join(seen, on=["query_id", "cand_id"], how="left").with_columns(
            pl.col("judgments_seen").fill_null(0))
    elif "n_judged" in ratings.columns:
        base = base.join(ratings.select("query_id", "cand_id", pl.col("n_judged").cast(pl.Int64)
                                        .alias("judgments_seen")), on=["query_id", "cand_id"], how="left")
    else:
        raise ValueError("qrels_sidecar needs judgments or a ratings table with n_judged")
    return base.with_columns(pl.lit(judge_id, dtype=pl.String).alias("judge"),
                             pl.lit(prompt_hash, dtype=pl.String).alias("prompt_hash")).sort("query_id", "cand_id")
