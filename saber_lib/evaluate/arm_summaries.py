"""Instruction arms summarised across models: by model category and by domain ("k of n models improve").

For each armed model ``m``, arm ``a`` (not ``p0``) and scope ``s`` (all queries, or the queries of
one domain; a query counts in each of its domains), in one setting::

    delta(m, a, s) = mean over the queries q of s scored under both of  nDCG_a(m, q) - nDCG_p0(m, q)

and over a group of models (a category, or all of them): the mean of ``delta`` and ``k of n``, the
number of models with ``delta > 0`` out of the models with a value. A category is the model's class
and its instruction role (``dense encoder, control``; :func:`saber_lib.core.names.retriever_class`,
``embed.ENVELOPES``): movement among the controls is what the added text does without an instruction
slot, the yardstick for the instructable models.
"""
from __future__ import annotations

import polars as pl

from .. import embed
from ..core.names import retriever_class
from ..report import plots

ALL_MODELS = "all models"
_LONG = {"scope": pl.Utf8, "group": pl.Utf8, "arm": pl.Utf8, "n_models": pl.Int64, "n_improved": pl.Int64,
         "mean_delta": pl.Float64}


def category(name: str) -> str:
    """A model's category for the summaries: its class and its instruction role."""
    return f"{retriever_class(name)}, {embed.envelope(name).arms}"


def model_deltas(p0: pl.DataFrame, per_arm: dict[str, pl.DataFrame], query_domains: dict, setting: str) -> pl.DataFrame:
    """``retriever, arm, domain, delta`` (``domain`` ``All`` for every query): the mean paired
    difference arm - p0 per model and scope in ``setting``; ``p0`` and each ``per_arm`` table have the
    stage's ``ndcg`` columns (``retriever, setting, query_id, ndcg``)."""
    base = p0.filter(pl.col("setting") == setting).select("retriever", "query_id", "ndcg")
    parts = []
    for arm, nd in per_arm.items():
        j = (base.join(nd.filter(pl.col("setting") == setting).select("retriever", "query_id", pl.col("ndcg").alias("arm_ndcg")),
                       on=["retriever", "query_id"])
             .with_columns((pl.col("arm_ndcg") - pl.col("ndcg")).alias("d"), pl.lit(arm).alias("arm")))
        doms = j.with_columns(pl.col("query_id").map_elements(lambda q: list(query_domains.get(q) or []),
                                                              return_dtype=pl.List(pl.Utf8)).alias("domain"))
        parts.append(j.with_columns(pl.lit("All").alias("domain")).select("retriever", "arm", "domain", "d"))
        parts.append(doms.explode("domain").drop_nulls("domain").select("retriever", "arm", "domain", "d"))
    if not parts:
        return pl.DataFrame(schema={"retriever": pl.Utf8, "arm": pl.Utf8, "domain": pl.Utf8, "delta": pl.Float64})
    return (pl.concat(parts).group_by("retriever", "arm", "domain", maintain_order=True)
            .agg(pl.col("d").mean().alias("delta")))


def _summarise(df: pl.DataFrame, scope: str, key: str) -> pl.DataFrame:
    return (df.group_by(key, "arm", maintain_order=True)
            .agg(pl.len().alias("n_models"), (pl.col("delta") > 0).sum().cast(pl.Int64).alias("n_improved"),
                 pl.col("delta").mean().alias("mean_delta"))
            .select(pl.lit(scope).alias("scope"), pl.col(key).alias("group"), "arm", "n_models", "n_improved",
                    "mean_delta"))


def arm_summary(deltas: pl.DataFrame) -> pl.DataFrame:
    """Long table ``scope, group, arm, n_models, n_improved, mean_delta``: scope ``category`` (each
    :func:`category`, then ``all models``, over all queries) and scope ``domain`` (each domain, in
    ``plots.DOMAIN_ORDER``, over all models)."""
    if not deltas.height:
        return pl.DataFrame(schema=_LONG)
    allq = deltas.filter(pl.col("domain") == "All")
    cats = {r: category(r) for r in allq["retriever"].unique().to_list()}
    by_cat = _summarise(allq.with_columns(pl.col("retriever").replace_strict(cats).alias("category"))
                        .sort("category", "retriever"), "category", "category")
    every = _summarise(allq.with_columns(pl.lit(ALL_MODELS).alias("all")), "category", "all")
    dom = deltas.filter(pl.col("domain") != "All")
    order = {d: i for i, d in enumerate(plots.DOMAIN_ORDER)}
    dom = dom.with_columns(pl.col("domain").replace_strict(order, default=len(order), return_dtype=pl.Int64)
                           .alias("_o")).sort("_o", "domain", "retriever")
    by_dom = _summarise(dom, "domain", "domain")
    return pl.concat([by_cat, every, by_dom]).cast(_LONG)


def summary_wide(summary: pl.DataFrame, scope: str) -> pl.DataFrame:
    """One row per group of ``scope``: per arm ``+0.0079 (15/24)`` (mean delta, k of n improved)
    and ``n`` (models)."""
    sub = summary.filter(pl.col("scope") == scope)
    arms = sub["arm"].unique(maintain_order=True).to_list()
    rows = []
    for (g,), part in sub.group_by("group", maintain_order=True):
        row = {scope: g}
        for arm, n, k, d in part.select("arm", "n_models", "n_improved", "mean_delta").iter_rows():
            row[arm] = f"{d:+.4f} ({k}/{n})"
        row["n"] = int(part["n_models"].max())
        rows.append(row)
    return pl.DataFrame(rows, schema={scope: pl.Utf8, **{a: pl.Utf8 for a in arms}, "n": pl.Int64})


def write_summaries(ctx, ndcg: pl.DataFrame, per_arm: dict[str, pl.DataFrame], query_domains: dict, *, k: int,
                    setting: str, caption_tail: str) -> list[pl.DataFrame]:
    """``instruction_arm_summary.parquet`` (:func:`arm_summary` of the armed models in ``setting``)
    and its two tables, ``evaluate_instruction_arms_by_category`` and ``..._by_domain``; returns them."""
    models = sorted({r for nd in per_arm.values() for r in nd["retriever"].unique().to_list()})
    deltas = model_deltas(ndcg.filter(pl.col("retriever").is_in(models)), per_arm, query_domains, setting)
    summary = arm_summary(deltas)
    summary.write_parquet(ctx.path("instruction_arm_summary.parquet"))
    what = (f"mean change of nDCG@{k} ({setting}) against each model's own p0 over the queries both scored, "
            f"and (k/n): how many of the n models improved")
    out = []
    for scope, how in (("category", "per model category (class, instruction role), then over all armed models"),
                       ("domain", "per domain over all armed models (a query counts in each of its domains)")):
        tab = summary_wide(summary, scope)
        ctx.save_table(tab, f"evaluate_instruction_arms_by_{scope}", caption=(
            f"Instruction arms {how}: {what}; a 'control' has no instruction slot and gets the text all the same. "
            + caption_tail))
        out.append(tab)
    return out
