"""The tournament stage's recipes (what ``07_tournament`` computes around :func:`run_tournament`):
how much of each text an LLM judge reads, the backend line every caption names and the judge banner,
the per-query judgment table and figure (over :func:`tournament.judgment_summary`), and the rating histograms and per-group means.
"""
from __future__ import annotations

from typing import Mapping

import matplotlib.pyplot as plt
import numpy as np
import polars as pl

from ..report.plots import GROUP_COLORS, GROUP_ORDER
from .registry import uses_llm

# Statistics of the per-query judgment table.
SUMMARY_STATISTICS = ["mean", "std", "min", "50%", "max"]


def text_clip(judge: str, llm: Mapping) -> int:
    """Words an LLM judge reads per problem and solution (``llm.text_max_words``, a prompt budget for
    slow CPUs); 0 (no clipping) for any other judge."""
    return llm.get("text_max_words", 0) if uses_llm(judge) else 0


def judge_backends_line(judge_name: str, paper_judge: bool, schedule: str, clip: int) -> str:
    """The judge (flagged when it is not the paper's LLM judge), the schedule and any clipping, for captions."""
    return (f"judge: {judge_name}" + ("" if paper_judge else " (NOT the paper's LLM judge)") + f"; schedule: {schedule}"
            + (f"; texts clipped to {clip} words per problem and solution" if clip else ""))


def judge_banner(judge_name: str, paper_judge: bool, schedule: str, rounds: int) -> str:
    """Markdown naming the judge, schedule and rounds, with a warning for a stand-in judge."""
    return (f"**Judge:** `{judge_name}`, schedule `{schedule}`, {rounds} rounds"
            + ("" if paper_judge else " - a CPU stand-in for the paper's LLM judge: ratings are not the paper's."))


def judgments_table(per_query: pl.DataFrame) -> pl.DataFrame:
    """Mean, std, min, median and max over queries of the per-query counts (query ids dropped)."""
    return (per_query.drop("query_id").describe()    # numeric columns only: no min/max of query ids, no null_count
            .filter(pl.col("statistic").is_in(SUMMARY_STATISTICS)))


def judgment_rates(per_query: pl.DataFrame) -> pl.DataFrame:
    """``per_query`` with ``failure rate`` (failures / judgments) and ``first-shown win rate``
    (first-shown wins / decided judgments: NaN for a query without a decided judgment)."""
    decided = pl.col("judgments") - pl.col("failures") - pl.col("ties")
    return per_query.with_columns((pl.col("failures") / pl.col("judgments")).alias("failure rate"),
                                  (pl.col("first_shown_wins") / decided).alias("first-shown win rate"))


def judgments_figure(per_query: pl.DataFrame):
    """Histograms of judgments per query, and of the failure and first-shown win rates (0.5 dashed)."""
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    axes[0].hist(per_query["judgments"], bins=20, color="#4C72B0")
    axes[0].set_xlabel("judgments per query")
    axes[0].set_ylabel("queries")
    rates = judgment_rates(per_query)
    axes[1].hist([rates["failure rate"].to_numpy(), rates["first-shown win rate"].fill_nan(None).drop_nulls().to_numpy()],
                 bins=20, label=["failure rate", "first-shown win rate"], color=["#C44E52", "#8172B3"])
    axes[1].axvline(0.5, color="#333333", lw=0.8, ls="--")
    axes[1].set_xlabel("rate per query")
    axes[1].legend()
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig


def query_histograms_figure(ratings: pl.DataFrame, top: float, n_queries: int = 12):
    """Rating histograms of the first ``n_queries`` queries, up to four panels a row."""
    qids = ratings["query_id"].unique(maintain_order=True).to_list()[:n_queries]
    ncol = min(4, len(qids))
    nrow = (len(qids) + ncol - 1) // ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(2.6 * ncol, 2.0 * nrow), squeeze=False, sharex=True)
    for ax, q in zip(axes.flat, qids):
        ax.hist(ratings.filter(pl.col("query_id") == q)["rating"], bins=np.linspace(0, top, 21), color="#4C72B0")
        ax.set_title(q, fontsize=7)
    for ax in axes.flat[len(qids):]:
        ax.axis("off")
    fig.supxlabel("rating")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig


def group_histogram_figure(ratings: pl.DataFrame, top: float):
    """Step histograms of all ratings, one per candidate group that has any."""
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    for g in GROUP_ORDER:
        vals = ratings.filter(pl.col("group") == g)["rating"].to_numpy()
        if len(vals):
            ax.hist(vals, bins=np.linspace(0, top, 26), histtype="step", lw=1.6, color=GROUP_COLORS[g], label=g)
    ax.set_xlabel("rating")
    ax.set_ylabel("candidates")
    ax.legend()
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig


def ratings_by_group(ratings: pl.DataFrame) -> pl.DataFrame:
    """Mean rating and number of candidates per group, groups sorted by name."""
    return (ratings.group_by("group").agg(pl.col("rating").mean().alias("mean rating"), pl.len().alias("candidates"))
            .sort("group"))

