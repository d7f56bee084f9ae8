"""This workbench's version of each of the authors' lexical baselines beside the published row.

The name map is :data:`saber_lib.retrieval.authors.PUBLISHED_COUNTERPART` (``bm25-a0`` -> ``bm25``,
``tfidf-ws`` -> ``tf-idf-no-tok``, ...; docs/retrievers.md). A pair is only compared on the same
queries when this run was evaluated on the released benchmark (its systems then join the published
ones); the difference and its test are then the leaderboard's own pairwise row (paired sign-flip,
Holm over all pairs), read here, not recomputed.
"""
from __future__ import annotations

import polars as pl

from ..retrieval.authors import PUBLISHED_COUNTERPART
from .scopes import OVERALL

COLUMNS = {"retriever": pl.Utf8, "published": pl.Utf8, "task": pl.Utf8, "mean": pl.Float64,
           "published_mean": pl.Float64, "n_common": pl.Int64, "mean_diff": pl.Float64,
           "p_value": pl.Float64, "p_adjusted": pl.Float64}


def counterpart_table(lb: pl.DataFrame, pw: pl.DataFrame, task: str,
                      mapping: dict[str, str] | None = None) -> pl.DataFrame:
    """One row per mapped pair with at least one side on the leaderboard ``lb`` (overall scope of
    ``task``): both means (null when a side is absent) and, when both are there, ``mean_diff`` =
    ours - published over the queries both scored with the pairwise test of ``pw``."""
    mapping = PUBLISHED_COUNTERPART if mapping is None else mapping
    over = lb.filter((pl.col("task") == task) & (pl.col("scope") == OVERALL))
    mean = dict(zip(over["system"].to_list(), over["mean"].to_list()))
    rows = []
    for ours, theirs in mapping.items():
        if ours not in mean and theirs not in mean:
            continue
        row = {"retriever": ours, "published": theirs, "task": task, "mean": mean.get(ours),
               "published_mean": mean.get(theirs), "n_common": None, "mean_diff": None, "p_value": None,
               "p_adjusted": None}
        pair = pw.filter((pl.col("task") == task) & (((pl.col("a") == ours) & (pl.col("b") == theirs))
                                                     | ((pl.col("a") == theirs) & (pl.col("b") == ours))))
        if pair.height:
            sign = 1.0 if pair["a"][0] == ours else -1.0
            row.update(n_common=int(pair["n_common"][0]), mean_diff=sign * float(pair["mean_diff"][0]),
                       p_value=float(pair["p_value"][0]), p_adjusted=float(pair["p_adjusted"][0]))
        rows.append(row)
    return pl.DataFrame(rows, schema=COLUMNS)


def caption(task: str, on_release: bool) -> str:
    """The table's caption: the name map and whether the two sides share queries."""
    pairs = ", ".join(f"{a} = {b}" for a, b in PUBLISHED_COUNTERPART.items())
    side = ("this run's retrievers were evaluated on the released benchmark: the difference is paired over "
            "the queries both scored (sign-flip test, Holm over all leaderboard pairs)" if on_release else
            "this run was evaluated on a benchmark built here (other queries, other ratings), so only the "
            "published side is shown")
    return f"The authors' lexical baselines ({task}), ours beside the published rows ({pairs}); {side}."
