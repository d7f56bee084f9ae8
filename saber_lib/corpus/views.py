"""Tables the corpus notebook shows: counts per source, duplicate examples, lengths, subjects.

Plain functions over the stage's tables (polars); the notebook only draws them.
"""
from __future__ import annotations

import numpy as np
import polars as pl

COUNT_COLUMNS = ("raw", "quarantined", "exact_duplicates", "near_duplicates", "kept")


def counts_table(report: dict) -> pl.DataFrame:
    """One row per source (priority order) and a total row: raw, quarantined, duplicates, kept."""
    rows = [{"source": s, **{k: report["per_source"][s][k] for k in COUNT_COLUMNS}}
            for s in report["sources"]]
    rows.append({"source": "total", **{k: report["total"][k] for k in COUNT_COLUMNS}})
    return pl.DataFrame(rows, schema={"source": pl.Utf8, **{k: pl.Int64 for k in COUNT_COLUMNS}},
                        orient="row")


def duplicate_pair_table(report: dict) -> pl.DataFrame:
    """Duplicates removed per (rule, removed source, kept source), most first."""
    rows = report["duplicates_by_source_pair"]
    schema = {"rule": pl.Utf8, "removed_source": pl.Utf8, "kept_source": pl.Utf8, "n": pl.Int64}
    return pl.DataFrame(rows, schema=schema, orient="row") if rows else pl.DataFrame(schema=schema)


def duplicate_examples(dedup_log: pl.DataFrame, corpus: pl.DataFrame, n: int, seed: int,
                       rule: str | None = None, width: int = 300) -> pl.DataFrame:
    """``n`` removed duplicates (seeded sample, in log order) beside the record that was kept."""
    log = dedup_log if rule is None else dedup_log.filter(pl.col("rule") == rule)
    if log.height > n:
        idx = np.sort(np.random.default_rng(seed).choice(log.height, size=n, replace=False))
        log = log[idx.tolist()]
    kept = corpus.select(pl.col("doc_id").alias("kept_id"), pl.col("problem").alias("kept_problem"))
    out = log.join(kept, on="kept_id", how="left", maintain_order="left")
    return out.select(
        "rule", "similarity", "removed_id", "kept_id",
        pl.col("removed_problem").str.slice(0, width), pl.col("kept_problem").str.slice(0, width))


def lengths(corpus: pl.DataFrame) -> pl.DataFrame:
    """Characters of problem and solution per record (with its source)."""
    return corpus.select("doc_id", "source", pl.col("problem").str.len_chars().alias("problem_chars"),
                         pl.col("solution").str.len_chars().alias("solution_chars"),
                         pl.col("extra_solutions").list.len().alias("extra_solutions"))


def length_summary(corpus: pl.DataFrame, order: list[str]) -> pl.DataFrame:
    """Median and 90th percentile of problem and solution length (characters) per source."""
    ln = lengths(corpus)
    out = ln.group_by("source").agg(
        pl.len().alias("n"),
        pl.col("problem_chars").median().alias("problem_median"),
        pl.col("problem_chars").quantile(0.9, "nearest").alias("problem_p90"),
        pl.col("solution_chars").median().alias("solution_median"),
        pl.col("solution_chars").quantile(0.9, "nearest").alias("solution_p90"),
        (pl.col("extra_solutions") > 0).sum().alias("with_extra_solutions"))
    rank = {s: i for i, s in enumerate(order)}
    return out.sort(pl.col("source").replace_strict(rank, default=len(rank)))


def domain_counts(corpus: pl.DataFrame, order: list[str], domains) -> pl.DataFrame:
    """Records per (source, mapped domain); domain "unmapped" for null. Wide: one column per domain."""
    labels = list(domains) + ["unmapped"]
    c = (corpus.with_columns(pl.col("source_domain").fill_null("unmapped"))
         .group_by("source", "source_domain").agg(pl.len().alias("n")))
    rows = []
    for s in order:
        sub = dict(c.filter(pl.col("source") == s).select("source_domain", "n").iter_rows())
        rows.append({"source": s, **{d: int(sub.get(d, 0)) for d in labels}})
    return pl.DataFrame(rows, schema={"source": pl.Utf8, **{d: pl.Int64 for d in labels}}, orient="row")


def coarse_subject() -> pl.Expr:
    """The source's subject label, cut to its area for Omni-MATH paths ("Algebra > ...; ..." -> "Algebra")."""
    area = pl.col("source_subject").str.split(";").list.first().str.split(" > ").list.first().str.strip_chars()
    return (pl.when(pl.col("source") == "omni_math_rule").then(area)
            .otherwise(pl.col("source_subject")).alias("subject"))


def top_subjects(corpus: pl.DataFrame, n: int = 25) -> pl.DataFrame:
    """The ``n`` most frequent (source, subject) labels (:func:`coarse_subject`); ties by name."""
    return (corpus.filter(pl.col("source_subject").is_not_null())
            .with_columns(coarse_subject())
            .group_by("source", "subject").agg(pl.len().alias("n"))
            .sort(["n", "source", "subject"], descending=[True, False, False]).head(n))
