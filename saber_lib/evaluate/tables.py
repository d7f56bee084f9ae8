"""Evaluation kernels (paper 4.1, App. C.3-C.4): nDCG@k, bootstrap CIs, per-domain means,
per-level breakdowns and correlations with MTEB scores.

The kernels take plain numpy arrays; :func:`summarize` turns the stage's ``ndcg`` table into the
paper's tables (it only groups and calls the kernels).

nDCG@k for one query with candidate ratings ``rel`` and retriever scores ``s``::

    pi      = candidates ordered by descending s; equal scores keep candidate order (stable sort)
    DCG@k   = sum_{i=1..min(k,n)} (2^rel_{pi(i)} - 1) / log2(i + 1)
    IDCG@k  = the same sum over the ratings sorted descending (all n candidates compete)
    nDCG@k  = DCG@k / IDCG@k, and 0 when IDCG@k = 0

The kernels themselves (nDCG, its tie policies, the bootstrap) are in :mod:`saber_lib.metrics`;
this module turns the stage's tables into the paper's tables.
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np
import polars as pl
from scipy import stats

from ..metrics.ndcg import ndcg_policy, ndcg_tie_range
from ..metrics.resample import bootstrap_ci


# ----------------------------------------------------------------------------- kernels
# nDCG and the bootstrap live in :mod:`saber_lib.metrics` (re-exported here under their old names)
def domain_means(values, query_domains: Sequence[Sequence[str]], domains: Sequence[str]) -> dict[str, float]:
    """Per-domain mean: for each domain, the mean of ``values`` over queries whose domain list
    contains it (multi-label: a query counts in each of its domains); NaN when none does."""
    v = np.asarray(values, dtype=np.float64)
    if len(query_domains) != v.size:
        raise ValueError("one domain list per value is needed")
    out = {}
    for d in domains:
        mask = np.array([d in (qd or ()) for qd in query_domains], dtype=bool)
        out[d] = float(v[mask].mean()) if mask.any() else math.nan
    return out


def group_means(values, groups) -> dict:
    """Mean of ``values`` per group label (e.g. MATH difficulty level); None labels are skipped."""
    v = np.asarray(values, dtype=np.float64)
    out: dict = {}
    for g in sorted({g for g in groups if g is not None}, key=str):
        mask = np.array([x == g for x in groups], dtype=bool)
        out[g] = float(v[mask].mean())
    return out


def correlations(x, y) -> dict:
    """Pearson r and Spearman rho (with p-values) between paired sequences; NaN with < 3 pairs."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.shape != y.shape:
        raise ValueError("x and y differ in length")
    n = int(x.size)
    if n < 3 or np.all(x == x[0]) or np.all(y == y[0]):
        return {"n": n, "pearson": math.nan, "pearson_p": math.nan, "spearman": math.nan, "spearman_p": math.nan}
    p = stats.pearsonr(x, y)
    s = stats.spearmanr(x, y)
    return {"n": n, "pearson": float(p.statistic), "pearson_p": float(p.pvalue),
            "spearman": float(s.statistic), "spearman_p": float(s.pvalue)}


# ----------------------------------------------------------------------------- stage helpers
def _joined(scores, ratings):
    """Per (retriever, setting), in sorted order, the ratings joined to its scores, sorted by (query,
    position): ``(retriever, setting, frame)``; a rated candidate without a score, or a candidate
    scored twice, is an error. One (retriever, setting) at a time: joining all at once held every
    retriever's copy of the 150,000 rated candidates of 1,000 queries together."""
    # every (retriever, setting) must score every rated candidate: a candidate one retriever missed
    # must not silently drop out of that retriever's ranking and ideal DCG
    rated = ratings.select("query_id", "cand_id", "position", "rating")
    by = scores.sort("retriever", "setting", maintain_order=True)
    bounds = (by.with_row_index("_row").group_by("retriever", "setting", maintain_order=True)
              .agg(pl.col("_row").first().alias("start"), pl.len().alias("n")))
    for r, s, a, n in bounds.iter_rows():
        part = by.slice(a, n)
        dup = part.select("query_id", "cand_id").is_duplicated()
        if dup.any():
            raise ValueError(f"candidates scored twice, e.g. "
                             f"{part.filter(dup).head(3).select('retriever', 'setting', 'query_id', 'cand_id').rows()}")
        j = rated.join(part.select("query_id", "cand_id", "score"), on=["query_id", "cand_id"], how="left")
        if j["score"].null_count():
            bad = j.filter(pl.col("score").is_null()).head(3).select("query_id", "cand_id").rows()
            raise ValueError(f"candidates without a score, e.g. {[(r, s, q, c) for q, c in bad]}")
        yield r, s, j.sort("query_id", "position")


def _query_groups(parts):
    """``(retriever, setting, query_id, ratings, scores)`` per query of :func:`_joined`'s frames, the
    two arrays in position order: slices of two whole columns (iterating a polars group_by would build
    one frame per group)."""
    for r, s, j in parts:
        bounds = (j.with_row_index("_row").group_by("query_id", maintain_order=True)
                  .agg(pl.col("_row").first().alias("start"), pl.len().alias("n")))
        rating, score = j["rating"].to_numpy(), j["score"].to_numpy()
        for q, a, n in bounds.iter_rows():
            yield r, s, q, rating[a:a + n], score[a:a + n]


def ndcg_table(scores, ratings, k: int = 10, tie_policy: str = "position", gain: str = "exp"):
    """Per-(retriever, setting, query) nDCG@k.

    ``scores``: polars frame with ``retriever``, ``setting``, ``query_id``, ``cand_id``, ``score``;
    ``ratings``: ``query_id``, ``cand_id``, ``position``, ``rating``. Candidates are taken in
    ``position`` order. ``tie_policy``: ``position`` breaks tied scores by position (earlier first);
    ``expected`` gives the exact mean over all orders of tied candidates
    (:func:`expected_ndcg_at_k`). ``gain``: ``exp`` (2^rel - 1, the benchmark's) or ``linear``.
    A candidate without a score is an error. Returns ``retriever``, ``setting``, ``query_id``, ``ndcg``.
    """
    fn = ndcg_policy(tie_policy)
    rows = [(r, s, q, fn(rating, score, k, gain)) for r, s, q, rating, score in _query_groups(_joined(scores, ratings))]
    return pl.DataFrame(rows, schema={"retriever": pl.Utf8, "setting": pl.Utf8, "query_id": pl.Utf8,
                                      "ndcg": pl.Float64}, orient="row")


def tie_table(scores, ratings, k: int = 10):
    """Per-(retriever, setting, query) sensitivity of nDCG@k to the order of tied scores:
    ``ndcg_min``, ``ndcg_max`` over all tie orders (:func:`ndcg_tie_range`) and ``tied`` (some tie
    touches the top k, i.e. min < max)."""
    rows = []
    for r, s, q, rating, score in _query_groups(_joined(scores, ratings)):
        lo, hi = ndcg_tie_range(rating, score, k)
        rows.append((r, s, q, lo, hi, hi > lo))
    return pl.DataFrame(rows, schema={"retriever": pl.Utf8, "setting": pl.Utf8, "query_id": pl.Utf8,
                                      "ndcg_min": pl.Float64, "ndcg_max": pl.Float64, "tied": pl.Boolean},
                        orient="row")


def tie_report(ties, ndcg):
    """One row per (retriever, setting) whose scores tie in some query's top k: the share of such
    queries, the reported mean nDCG, the means of the per-query minimum and maximum over tie orders,
    and ``sensitivity`` = mean over queries of (max - min). Empty when no retriever ties."""
    j = ties.join(ndcg, on=["retriever", "setting", "query_id"])
    out = (j.group_by("retriever", "setting", maintain_order=True)
           .agg(pl.col("tied").mean().alias("tied_queries"), pl.col("ndcg").mean().alias("ndcg"),
                pl.col("ndcg_min").mean().alias("ndcg_min"), pl.col("ndcg_max").mean().alias("ndcg_max"),
                (pl.col("ndcg_max") - pl.col("ndcg_min")).mean().alias("sensitivity"))
           .filter(pl.col("tied_queries") > 0))
    return out.rename({"retriever": "model"})


def summarize(ndcg, query_domains: Mapping[str, Sequence[str]], domains: Sequence[str],
              n_bootstrap: int = 1000, level: float = 0.95, seed: int = 0):
    """Long table: one row per (retriever, setting, group) with ``mean``, ``lo``, ``hi``, ``n``.

    ``group`` is ``Overall`` or a domain (queries whose domains include it). CIs: bootstrap over
    the queries of the group, seeded with ``seed``.
    """
    rows = []
    for (r, s), g in ndcg.sort("retriever", "setting", "query_id").group_by(["retriever", "setting"],
                                                                           maintain_order=True):
        v = g["ndcg"].to_numpy()
        qd = [query_domains.get(q) or () for q in g["query_id"]]
        groups = [("Overall", np.ones(v.size, dtype=bool))]
        groups += [(d, np.array([d in x for x in qd], dtype=bool)) for d in domains]
        for name, mask in groups:
            if mask.any():
                m, lo, hi = bootstrap_ci(v[mask], n_bootstrap, level, seed)
            else:
                m = lo = hi = math.nan
            rows.append((r, s, name, m, lo, hi, int(mask.sum())))
    return pl.DataFrame(rows, schema={"retriever": pl.Utf8, "setting": pl.Utf8, "group": pl.Utf8,
                                      "mean": pl.Float64, "lo": pl.Float64, "hi": pl.Float64,
                                      "n": pl.Int64}, orient="row")


# ----------------------------------------------------------------------------- paper tables
def main_table(summary, domains: Sequence[str], main_setting: str = "statement-full",
               other_settings: Sequence[str] = ("statement-statement", "full-full")):
    """Models x (Overall, domains of ``main_setting`` | Overall of each other setting), sorted by
    the main Overall score, best first (the paper's main results table)."""
    cols = ["Overall", *domains]
    rows = []
    for r in summary["retriever"].unique(maintain_order=True):
        sub = summary.filter(pl.col("retriever") == r)
        main = {g: m for g, m in sub.filter(pl.col("setting") == main_setting).select("group", "mean").iter_rows()}
        row = {"model": r, **{c: main.get(c, math.nan) for c in cols}}
        for s in other_settings:
            o = sub.filter((pl.col("setting") == s) & (pl.col("group") == "Overall"))["mean"]
            row[_title(s)] = float(o[0]) if len(o) else math.nan
        rows.append(row)
    df = pl.DataFrame(rows)
    return df.sort("Overall", descending=True, nulls_last=True) if df.height else df


def ci_table(summary, domains: Sequence[str], setting: str = "statement-full", digits: int = 3):
    """Models x (Overall, domains) with cells ``mean [lo, hi]`` for one setting."""
    fmt = "{:.%df} [{:.%df}, {:.%df}]" % (digits, digits, digits)
    sub = summary.filter(pl.col("setting") == setting)
    rows = []
    for r in sub["retriever"].unique(maintain_order=True):
        g = {k: (m, lo, hi) for _, _, k, m, lo, hi, _ in sub.filter(pl.col("retriever") == r).iter_rows()}
        row = {"model": r}
        for c in ["Overall", *domains]:
            m, lo, hi = g.get(c, (math.nan,) * 3)
            row[c] = "-" if m != m else fmt.format(m, lo, hi)
        row["_sort"] = g.get("Overall", (math.nan,))[0]
        rows.append(row)
    df = pl.DataFrame(rows)
    return df.sort("_sort", descending=True, nulls_last=True).drop("_sort") if df.height else df


def settings_table(summary, domains: Sequence[str], settings: Sequence[str]):
    """One row per (model, setting): Overall and per-domain means (the additional settings)."""
    rows = []
    for r in summary["retriever"].unique(maintain_order=True):
        for s in settings:
            sub = summary.filter((pl.col("retriever") == r) & (pl.col("setting") == s))
            if not sub.height:
                continue
            g = dict(sub.select("group", "mean").iter_rows())
            rows.append({"model": r, "setting": s, **{c: g.get(c, math.nan) for c in ["Overall", *domains]}})
    return pl.DataFrame(rows)


def level_table(ndcg, query_levels: Mapping[str, object], setting: str = "statement-full"):
    """Mean nDCG per difficulty level (e.g. MATH "Level 1".."Level 5") for queries that have one;
    a ``n`` row gives the number of queries per level."""
    sub = ndcg.filter(pl.col("setting") == setting)
    levels = sorted({str(v) for v in query_levels.values() if v is not None})
    if not levels:
        return pl.DataFrame()
    rows = []
    for r in sub["retriever"].unique(maintain_order=True):
        g = sub.filter(pl.col("retriever") == r)
        lv = [None if query_levels.get(q) is None else str(query_levels.get(q)) for q in g["query_id"]]
        means = group_means(g["ndcg"].to_numpy(), lv)
        rows.append({"model": r, **{L: means.get(L, math.nan) for L in levels}})
    counts = {L: float(sum(str(v) == L for v in query_levels.values() if v is not None)) for L in levels}
    rows.append({"model": "n queries", **counts})
    return pl.DataFrame(rows)


def describe_judge(info: Mapping) -> str:
    """A short label of what produced the ratings, from the tournament stage's recorded info."""
    parts = []
    for k in ("judge", "judge_backend", "backend", "judge_model", "model", "judge_embed_model"):
        v = info.get(k) if isinstance(info, Mapping) else None
        if v and str(v) not in parts and not isinstance(v, (dict, list)):
            parts.append(str(v))
    if not parts:
        return "judge not recorded"
    label = " / ".join(parts)
    judge = info.get("judge") if isinstance(info, Mapping) else None
    if isinstance(judge, str) and judge and not judge.startswith("llm"):
        label += " (CPU stand-in, NOT the paper's LLM judge)"
    return label


def _title(setting: str) -> str:
    return "-".join(w.capitalize() for w in setting.split("-"))
