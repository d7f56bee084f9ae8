"""Rephrased-copy rank against quality across systems: does a system that ranks a rephrased copy of
the query's own problem near the top also score a higher nDCG@10?

Published side: ``dedup_summaries.jsonl`` (one JSON object per line and system: ``model`` and the
two summaries the authors computed, ``insert_per_query``, one copy inserted among the query's 150
candidates, and ``insert_all_rephrased``, every query's copy inserted at once; each with
``avg_rank``, ``median_rank``, ``trimmed_mean_rank_95``, ``p90_rank``, ``p99_rank``, ``max_rank``
and ``top_1`` .. ``top_128``; ``null`` when not run) beside the published means. Workbench side: a
run's ``robustness/rephrased_rank.parquet`` (pools ``candidates``: one copy, ``candidates_all``: all
copies, ``corpus``) beside the run's own means.

Statistic: Spearman's rho across systems between a reading of the copy's rank and the overall mean
nDCG@10 of a setting, with a 95% interval from resampling the systems (seeded per cell). A lower
rank is better, so a benchmark whose quality tracks the probe shows a negative rho for the mean rank
and a positive one for ``top1``.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import polars as pl

from ..core.data import strict_json_loads
from ..core.seeds import rng_for
from ..metrics.correlation import correlations_with_intervals
from .published import LayoutError, regular

POOLS = {"insert_per_query": "one copy", "insert_all_rephrased": "all copies"}
RUN_POOLS = {"candidates": "one copy", "candidates_all": "all copies", "corpus": "corpus"}
# the authors' field -> this workbench's reading (robustness/rephrased_rank.parquet's column)
READINGS = {"avg_rank": "mean_rank", "median_rank": "median_rank", "trimmed_mean_rank_95": "trimmed_mean_95",
            "p90_rank": "p90_rank", "p99_rank": "p99_rank", "max_rank": "max_rank",
            **{f"top_{k}": f"top{k}" for k in (1, 2, 4, 8, 16, 32, 64, 128)}}
CORRELATED = ("mean_rank", "median_rank", "top1")   # the readings correlated with quality
SUMMARY_COLUMNS = {"system": pl.Utf8, "pool": pl.Utf8, "n_queries": pl.Int64,
                   **{v: pl.Float64 for v in READINGS.values()}}
CORRELATION_COLUMNS = {"source": pl.Utf8, "pool": pl.Utf8, "reading": pl.Utf8, "task": pl.Utf8,
                       "n_systems": pl.Int64, "spearman": pl.Float64, "spearman_low": pl.Float64,
                       "spearman_high": pl.Float64, "n_resamples": pl.Int64, "systems": pl.Utf8}


def read_dedup_summaries(path) -> pl.DataFrame:
    """One row per (system, pool) with a summary: :data:`SUMMARY_COLUMNS`. A line that is not a JSON
    object with the fields, a reading that is not a number or out of its range (a rank below 1, a
    share outside [0, 1]), a system twice, or no line at all: one error naming the file (and line)."""
    path = Path(path)
    try:
        lines = regular(path).read_text(encoding="utf-8").splitlines()   # a FIFO is refused, never opened
    except FileNotFoundError:
        raise LayoutError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise LayoutError(f"{path}: not readable ({e})") from None
    rows, seen = [], {}
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = strict_json_loads(line)
        except ValueError as e:
            raise LayoutError(f"{path}: line {n}: not valid JSON ({e})") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("model"), str):
            raise LayoutError(f"{path}: line {n}: field 'model': expected an object with a model name")
        name = obj["model"]
        if name in seen:
            raise LayoutError(f"{path}: line {n}: system {name!r} already on line {seen[name]}")
        seen[name] = n
        nq = obj.get("n_queries")
        for field, pool in POOLS.items():
            s = obj.get(field)
            if s is None:
                continue
            if not isinstance(s, dict):
                raise LayoutError(f"{path}: line {n}: field '{field}': expected an object or null")
            row = {"system": name, "pool": pool, "n_queries": nq if isinstance(nq, int) else None}
            for a, ours in READINGS.items():
                v = s.get(a)
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                    raise LayoutError(f"{path}: line {n}: field '{field}.{a}': expected a number, got {v!r}")
                why = _out_of_range(a, v)
                if why:
                    raise LayoutError(f"{path}: line {n}: field '{field}.{a}': {v!r} is out of range ({why})")
                row[ours] = float(v)
            rows.append(row)
    if not seen:
        raise LayoutError(f"{path}: no summaries (empty file): give the file with one JSON object per system, "
                          f"or leave --dedup out")
    return pl.DataFrame(rows, schema=SUMMARY_COLUMNS)


def _out_of_range(field: str, v: float) -> str | None:
    """Why a reading is impossible (None when it is not): a rank is at least 1 (1 = first), a
    ``top_k`` share is in [0, 1]."""
    if field.startswith("top_"):
        return None if 0 <= v <= 1 else "a share is in [0, 1]"
    return None if v >= 1 else "a rank is at least 1"


def correlation_rows(source: str, summary: pl.DataFrame, quality: Mapping[str, Mapping[str, float]],
                     tasks: Sequence[str], pools: Sequence[str], n_resamples: int, seed: int,
                     level: float = 0.95, readings: Sequence[str] = CORRELATED) -> list[dict]:
    """Spearman per (pool, reading, setting) over the systems with a summary in the pool and a mean in
    the setting (``quality[system][task]``); rows of :data:`CORRELATION_COLUMNS`."""
    rows = []
    for pool in pools:
        sub = summary.filter(pl.col("pool") == pool).sort("system")
        for reading in readings:
            for task in tasks:
                names, x, y = [], [], []
                for name, v in sub.select("system", reading).iter_rows():
                    q = quality.get(name, {}).get(task)
                    if v is not None and q is not None and q == q and v == v:
                        names.append(name)
                        x.append(v)
                        y.append(q)
                res = correlations_with_intervals(np.array(x), np.array(y), n_resamples,
                                                  rng_for(seed, "rephrased", source, pool, reading, task), level,
                                                  coefficients=("spearman",))
                rows.append({"source": source, "pool": pool, "reading": reading, "task": task,
                             "n_systems": res["n_systems"], "spearman": res["spearman"],
                             "spearman_low": res["spearman_low"], "spearman_high": res["spearman_high"],
                             "n_resamples": int(n_resamples), "systems": ", ".join(names)})
    return rows


def run_summary(path) -> pl.DataFrame:
    """A run's ``robustness/rephrased_rank.parquet`` as :data:`SUMMARY_COLUMNS` rows (:func:`summary_from_table`)."""
    path = Path(path)
    try:
        df = pl.read_parquet(path)
    except FileNotFoundError:
        raise LayoutError(f"{path}: file not found") from None
    except Exception as e:  # polars raises several error types for a broken file
        raise LayoutError(f"{path}: not a readable Parquet file ({e})") from None
    return summary_from_table(df, path)


def summary_from_table(df: pl.DataFrame, path="rephrased_rank.parquet") -> pl.DataFrame:
    """The robustness stage's rephrased-rank table as :data:`SUMMARY_COLUMNS` rows (pool names as on
    the published side; readings the table lacks, from an older run, are null)."""
    for c in ("retriever", "pool", "n_queries", "mean_rank"):
        if c not in df.columns:
            raise LayoutError(f"{path}: field '{c}': column missing")
    if df.select("retriever", "pool").is_duplicated().any():
        raise LayoutError(f"{path}: field 'pool': a (retriever, pool) appears twice (several rewriters?)")
    cols = [pl.col("retriever").alias("system"), pl.col("pool").replace_strict(RUN_POOLS, default=pl.col("pool")),
            pl.col("n_queries").cast(pl.Int64)]
    cols += [(pl.col(c) if c in df.columns else pl.lit(None)).cast(pl.Float64).alias(c) for c in READINGS.values()]
    return df.select(cols)


def rephrased_correlation_frame(rows: list[dict]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=CORRELATION_COLUMNS)


def run_quality(ndcg: pl.DataFrame) -> dict[str, dict[str, float]]:
    """``retriever -> setting -> mean nDCG`` over the scored queries of an ``evaluate/ndcg.parquet`` frame."""
    means = ndcg.drop_nulls("ndcg").filter(pl.col("ndcg").is_not_nan()).group_by("retriever", "setting").agg(
        pl.col("ndcg").mean())
    out: dict[str, dict[str, float]] = {}
    for r, t, m in means.iter_rows():
        out.setdefault(r, {})[t] = float(m)
    return out


def across_retrievers(table: pl.DataFrame, ndcg: pl.DataFrame, n_resamples: int, seed: int,
                      source: str = "this run") -> pl.DataFrame:
    """Spearman across a run's retrievers between each rephrased-rank reading (the robustness table
    ``table``) and their mean nDCG per setting (``ndcg``: ``retriever, setting, query_id, ndcg``),
    every pool of the table, settings statement-full first; :data:`CORRELATION_COLUMNS`."""
    summ = summary_from_table(table)
    settings = sorted(set(ndcg["setting"].to_list()), key=lambda t: (t != "statement-full", t))
    pools = [p for p in ("one copy", "all copies", "corpus") if p in set(summ["pool"].to_list())]
    return rephrased_correlation_frame(correlation_rows(source, summ, run_quality(ndcg), settings, pools,
                                                       n_resamples, seed))


def rephrased_scatter_figure(summary: pl.DataFrame, quality: Mapping[str, Mapping[str, float]], tasks: Sequence[str],
                   corr: pl.DataFrame, lexical: set[str], source: str = "published"):
    """One panel per setting: each system's mean rank of its rephrased copy (one copy inserted; log
    scale) against its nDCG@10, labelled, lexical systems as grey squares; the title gives Spearman
    with its interval for both pools."""
    import matplotlib.pyplot as plt  # figures only

    fig, axes = plt.subplots(1, len(tasks), figsize=(5.6 * len(tasks), 5.0), squeeze=False)
    one = summary.filter(pl.col("pool") == "one copy")
    for ax, task in zip(axes[0], tasks):
        for name, r in one.select("system", "mean_rank").iter_rows():
            q = quality.get(name, {}).get(task)
            if q is None or r is None:
                continue
            lex = name in lexical
            ax.scatter([r], [q], color="#888888" if lex else "#4c72b0", marker="s" if lex else "o", s=24, zorder=3)
            ax.annotate(name, (r, q), fontsize=6, xytext=(3, 2), textcoords="offset points")
        c = corr.filter((pl.col("source") == source) & (pl.col("task") == task) & (pl.col("reading") == "mean_rank"))
        ax.set_title("\n".join(f"{p}: n={n}, Spearman {_fmt(s)} [{_fmt(lo)}, {_fmt(hi)}]" for p, n, s, lo, hi in
                               c.select("pool", "n_systems", "spearman", "spearman_low", "spearman_high").iter_rows()),
                     fontsize=7, loc="left")
        ax.set_xscale("log")
        ax.set_xticks([1, 2, 5, 10, 20, 50, 100])
        ax.xaxis.set_major_formatter(plt.matplotlib.ticker.ScalarFormatter())
        ax.xaxis.set_minor_formatter(plt.matplotlib.ticker.NullFormatter())
        ax.set_xlabel("mean rank of the rephrased copy (one copy among the candidates; 1 = first)")
        ax.set_ylabel(f"nDCG@10, {task}")
        ax.grid(alpha=0.3)
    axes[0][0].legend(handles=[plt.Line2D([], [], color="#4c72b0", marker="o", linestyle="", label="neural / other"),
                               plt.Line2D([], [], color="#888888", marker="s", linestyle="", label="lexical")],
                      fontsize=7, loc="lower left")
    fig.tight_layout()
    return fig


def _fmt(v) -> str:
    return "-" if v is None or v != v else f"{v:.2f}"
