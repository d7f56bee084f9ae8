"""The open-corpus stage's recipes (what ``17_open_corpus`` computes around :func:`run_open_corpus`):
its inputs, the facts for the manifest, pooled judging with the profile's judge, the metrics against
both qrels, the tables and the Hit@k figure. ``params`` is the notebook's parameters by name (the
``open_corpus``, ``evaluate``, ``tournament`` and ``run`` keys, and ``llm``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import polars as pl

from ..evaluate.tables import describe_judge
from ..judging.registry import JudgeSettings, uses_llm
from ..judging.spec_judges import judge_from_profile
from ..llm import llm_cache_path, make_backend
from . import pooled
from .track import summarize_metrics


@dataclass
class Inputs:
    corpus: pl.DataFrame
    dedup_log: pl.DataFrame
    summaries: pl.DataFrame
    ratings: pl.DataFrame
    queries: pl.DataFrame      # query_id of every rated benchmark query, in benchmark order
    judge_name: str            # who rated the benchmark
    summarizer: str | None     # what wrote the summaries


def load_inputs(ctx) -> Inputs:
    """This run's artifacts through ``ctx.input``; only the queries the tournament rated
    (``tournament_max_queries`` may cap them). The summarizer is the ``summarizer`` the summaries
    stage recorded, else its ``backend``."""
    corpus = pl.read_parquet(ctx.input("corpus", "corpus.parquet"))
    dedup_log = pl.read_parquet(ctx.input("corpus", "dedup_log.parquet"))
    summaries = pl.read_parquet(ctx.input("summaries", "summaries.parquet"))
    benchmark = pl.read_parquet(ctx.input("select", "benchmark.parquet"))
    ratings = pl.read_parquet(ctx.input("tournament", "ratings.parquet"))
    info = ctx.upstream_info("summaries")
    queries = (benchmark.filter(pl.col("query_id").is_in(ratings["query_id"].unique().implode()))
               .select("query_id").unique(maintain_order=True))
    return Inputs(corpus, dedup_log, summaries, ratings, queries, describe_judge(ctx.upstream_info("tournament")),
                  info.get("summarizer") or info.get("backend"))


def retrieval_record(result, summarizer, seconds: float) -> dict:
    """What the manifest keeps of the retrieval: index backends, times, what was built, duplicates
    excluded, and how many documents without a summary were indexed by their statement."""
    idx, timing = result.info["indexes"], result.info["timing"]
    return {"index_backends": index_backends(result), "retrieval_s": round(seconds, 2),
            "index_seconds": {k: round(v["seconds"], 2) for k, v in idx.items()},
            "index_built": {k: bool(v.get("built")) for k, v in idx.items()},
            "timing": {k: round(v, 3) if isinstance(v, float) else v for k, v in timing.items()},
            "excluded_duplicates": result.info["excluded_duplicates"], "summarizer": summarizer,
            "summary_fallback": timing.get("summary/summary_fallback", timing.get("summary_fallback/summary", 0))}


def index_backends(result) -> list[str]:
    """``<system>: <model>`` of every index the retrieval used, sorted."""
    return sorted({f"{k.split('/')[0]}: {v.get('model', '?')}" for k, v in result.info["indexes"].items()})


@dataclass
class PoolJudged:
    qrels: pl.DataFrame
    per_round: pl.DataFrame
    judge_label: str
    info: dict | None          # the pooled tournaments' facts (None when nothing was judged)
    backend: object            # the LLM backend used (None without one)


def judge_pooled(params: Mapping, inputs: Inputs, pool, store_dir) -> PoolJudged:
    """Rate the pool with the profile's judge (``oc_judge_pool``; an LLM judge gets its backend
    from ``llm``) and grow the qrels; without judging, the qrels are the benchmark's ratings."""
    backend = None
    if params["oc_judge_pool"] and uses_llm(params["judge"]):
        backend = make_backend(params["llm"], llm_cache_path(params["llm"], params["run_dir"], params["cache_dir"]))
    judge = judge_from_profile(JudgeSettings.from_params(params), backend) if params["oc_judge_pool"] else None
    if judge is None:
        qrels = pooled.grow_qrels(inputs.ratings, pool.head(0).with_columns(pl.lit(0.0).alias("rating")))
        per_round = pl.DataFrame(schema={"round": pl.Int64, "judgments": pl.Int64, "queries": pl.Int64})
        return PoolJudged(qrels, per_round, "none", None, backend)
    label = judge.name + (" (CPU stand-in for the paper's LLM judge)" if not uses_llm(params["judge"]) else "")
    judged = pooled.judge_pool(inputs.ratings, pool, inputs.corpus, judge, rounds=params["oc_pool_rounds"],
                               schedule=params["schedule"], seed=params["seed"], store_dir=store_dir,
                               alpha=params["bt_alpha"], top=params["rating_top"],
                               max_per_query=params["oc_max_pool_per_query"])
    return PoolJudged(judged.qrels, judged.per_round, label, judged.info, backend)


def metrics_both(params: Mapping, result, qrels, dedup_log) -> pl.DataFrame:
    """Every metric with its interval against the benchmark's ratings alone (``qrels`` =
    ``benchmark``) and against the grown qrels (``pooled``), ``qrels`` first."""
    per_query = pl.concat([
        result.per_query.with_columns(pl.lit("benchmark").alias("qrels")),
        pooled.score_runs(result.runs, qrels, ks=params["oc_ks"], cutoff=params["oc_relevance_cutoff"],
                          ndcg_k=params["ndcg_k"], dedup_log=dedup_log).with_columns(pl.lit("pooled").alias("qrels"))])
    metrics = pl.concat([summarize_metrics(g.drop("qrels"), params["n_bootstrap"], params["ci_level"], params["seed"])
                         .with_columns(pl.lit(name).alias("qrels"))
                         for (name,), g in per_query.group_by("qrels", maintain_order=True)])
    return metrics.select("qrels", *[c for c in metrics.columns if c != "qrels"])


def caption_tail(params: Mapping, inputs: Inputs, judge_label: str, backends: list[str], summary_fallback: int) -> str:
    """What every table of the stage ends with: queries, documents, relevance cutoff, judges,
    indexes, summarizer (and the documents indexed by their statement for want of a summary)."""
    return (f"{inputs.queries.height} queries over {inputs.corpus.height} documents; relevant = rating >= "
            f"{params['oc_relevance_cutoff']:g}; ratings: benchmark tournament + pooled depth {params['oc_pool_depth']}, "
            f"judge {judge_label}; indexes: {', '.join(backends)}; summaries: {inputs.summarizer}"
            + (f" ({summary_fallback} documents without a summary indexed by their statement)" if summary_fallback else ""))


def shown_k(ks) -> int:
    """The k of the main table: 10 when computed, else the largest."""
    return 10 if 10 in ks else max(ks)


def pooled_main_table(metrics, ks) -> pl.DataFrame:
    """Per system and representation, against the pooled qrels: every metric at the shown k (nDCG at
    its own k) and judged@k before and after pooling."""
    k = shown_k(ks)
    main = (metrics.filter((pl.col("qrels") == "pooled")
                           & (((pl.col("metric") != "ndcg") & (pl.col("k") == k)) | (pl.col("metric") == "ndcg")))
            .with_columns(pl.format("{}@{}", "metric", "k").alias("measure"))
            .pivot(on="measure", index=["system", "representation"], values="mean"))
    judged = (metrics.filter((pl.col("metric") == "hit") & (pl.col("k") == k))
              .pivot(on="qrels", index=["system", "representation"], values="judged_at_k")
              .rename({"benchmark": f"judged@{k} before pooling", "pooled": f"judged@{k}"}))
    return main.join(judged, on=["system", "representation"]).sort("system", "representation")


def pooled_ci_table(metrics) -> pl.DataFrame:
    """Hit@k and MRR@k against the pooled qrels as ``mean [lo, hi]``, with judged@k and the queries."""
    return (metrics.filter((pl.col("qrels") == "pooled") & (pl.col("metric").is_in(["hit", "mrr"])))
            .select("system", "representation", "metric", "k",
                    pl.format("{} [{}, {}]", pl.col("mean").round(3), pl.col("ci_low").round(3),
                              pl.col("ci_high").round(3)).alias("mean [CI]"),
                    pl.col("judged_at_k").alias("judged@k"), "n_queries")
            .sort("system", "representation", "metric", "k"))


def hit_curve_figure(metrics, ks, cutoff: float):
    """Hit@k against k (log scale) per system and representation, one panel per qrels."""
    import seaborn  # plotting only once saber_lib.plots has chosen the backend

    grid = seaborn.relplot(data=metrics.filter(pl.col("metric") == "hit").to_dict(as_series=False), x="k", y="mean",
                           hue="system", style="representation", col="qrels", kind="line", markers=True, height=3.2,
                           aspect=1.2)
    for ax in grid.axes.flat:
        ax.set_xscale("log")
        ax.set_xticks(list(ks), [str(k) for k in ks])
    grid.set_axis_labels("k", f"Hit@k (rating >= {cutoff:g})")
    return grid.figure
