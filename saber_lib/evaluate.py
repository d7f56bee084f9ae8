"""Evaluation kernels (paper 4.1, App. C.3-C.4): nDCG@k, bootstrap CIs, per-domain means,
per-level breakdowns and correlations with MTEB scores.

The kernels take plain numpy arrays; :func:`summarize` turns the stage's ``ndcg`` table into the
paper's tables (it only groups and calls the kernels).

nDCG@k for one query with candidate ratings ``rel`` and retriever scores ``s``::

    pi      = candidates ordered by descending s; equal scores keep candidate order (stable sort)
    DCG@k   = sum_{i=1..min(k,n)} (2^rel_{pi(i)} - 1) / log2(i + 1)
    IDCG@k  = the same sum over the ratings sorted descending (all n candidates compete)
    nDCG@k  = DCG@k / IDCG@k, and 0 when IDCG@k = 0
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np
import polars as pl
from scipy import stats


# ----------------------------------------------------------------------------- kernels
def dcg_gains(ratings) -> np.ndarray:
    """Exponential gain 2^rel - 1."""
    return np.exp2(np.asarray(ratings, dtype=np.float64)) - 1.0


def _discounts(m: int) -> np.ndarray:
    return 1.0 / np.log2(np.arange(2, m + 2, dtype=np.float64))


def _checked(ratings, scores, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``ratings`` and ``scores`` as float64 vectors of one length, ``k >= 1``, no NaN, ratings >= 0."""
    rel = np.asarray(ratings, dtype=np.float64).ravel()
    s = np.asarray(scores, dtype=np.float64).ravel()
    if rel.shape != s.shape:
        raise ValueError(f"ratings ({rel.size}) and scores ({s.size}) differ in length")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if np.isnan(s).any() or np.isnan(rel).any():
        raise ValueError("ratings and scores must not contain NaN")
    if (rel < 0).any():
        raise ValueError("ratings must be >= 0")
    return rel, s


def ndcg_at_k(ratings, scores, k: int = 10) -> float:
    """nDCG@k of one query (formula in the module docstring).

    ``ratings``: graded relevance of each candidate (>= 0); ``scores``: the retriever's score of the
    same candidates in the same order. Ties in ``scores`` are broken by candidate position, earlier
    first. ``k`` larger than the list uses the whole list.
    """
    rel, s = _checked(ratings, scores, k)
    m = min(k, rel.size)
    if m == 0:
        return 0.0
    disc = _discounts(m)
    ideal = float(dcg_gains(np.sort(rel)[::-1][:m]) @ disc)
    if ideal <= 0.0:
        return 0.0
    order = np.argsort(-s, kind="stable")[:m]
    return float(dcg_gains(rel[order]) @ disc) / ideal


def bootstrap_ci(values, n_resamples: int = 1000, level: float = 0.95, seed: int = 0):
    """(mean, low, high): the mean of ``values`` and its percentile-bootstrap interval.

    ``n_resamples`` resamples of len(values) entries drawn with replacement (``numpy`` generator
    seeded with ``seed``); low/high are the (1-level)/2 and (1+level)/2 quantiles of the resample
    means (``scipy.stats.bootstrap``, method "percentile"). One value gives (v, v, v).
    """
    x = np.asarray(values, dtype=np.float64).ravel()
    if x.size == 0:
        raise ValueError("bootstrap_ci needs at least one value")
    if np.isnan(x).any():
        raise ValueError("bootstrap_ci: values contain NaN")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    mean = float(x.mean())
    if x.size == 1 or np.all(x == x[0]):
        return mean, mean, mean
    res = stats.bootstrap((x,), np.mean, n_resamples=int(n_resamples), confidence_level=level,
                          method="percentile", vectorized=True,
                          rng=np.random.default_rng(seed))
    return mean, float(res.confidence_interval.low), float(res.confidence_interval.high)


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
TIE_POLICIES = ("position", "expected")


def _joined(scores, ratings):
    """Scores joined to the ratings, one row per (retriever, setting, rated candidate), sorted by
    (retriever, setting, query, position); a rated candidate without a score is an error."""
    # every (retriever, setting) must score every rated candidate: a candidate one retriever missed
    # must not silently drop out of that retriever's ranking and ideal DCG
    keys = ["retriever", "setting", "query_id", "cand_id"]
    if scores.select(keys).is_duplicated().any():
        bad = scores.filter(scores.select(keys).is_duplicated()).head(3)
        raise ValueError(f"candidates scored twice, e.g. {bad.select(keys).rows()}")
    j = scores.select("retriever", "setting").unique(maintain_order=True).join(
        ratings.select("query_id", "cand_id", "position", "rating"), how="cross").join(
        scores, on=keys, how="left")
    if j["score"].null_count():
        bad = j.filter(pl.col("score").is_null()).head(3)
        raise ValueError(f"candidates without a score, e.g. {bad.select(keys).rows()}")
    return j.sort("retriever", "setting", "query_id", "position")


def ndcg_table(scores, ratings, k: int = 10, tie_policy: str = "position"):
    """Per-(retriever, setting, query) nDCG@k.

    ``scores``: polars frame with ``retriever``, ``setting``, ``query_id``, ``cand_id``, ``score``;
    ``ratings``: ``query_id``, ``cand_id``, ``position``, ``rating``. Candidates are taken in
    ``position`` order. ``tie_policy``: ``position`` breaks tied scores by position (earlier first);
    ``expected`` gives the exact mean over all orders of tied candidates
    (:func:`expected_ndcg_at_k`). A candidate without a score is an error.
    Returns ``retriever``, ``setting``, ``query_id``, ``ndcg``.
    """
    if tie_policy not in TIE_POLICIES:
        raise ValueError(f"tie_policy must be one of {TIE_POLICIES}, got {tie_policy!r}")
    fn = ndcg_at_k if tie_policy == "position" else expected_ndcg_at_k
    rows = []
    for (r, s, q), g in _joined(scores, ratings).group_by(["retriever", "setting", "query_id"], maintain_order=True):
        rows.append((r, s, q, fn(g["rating"].to_numpy(), g["score"].to_numpy(), k)))
    return pl.DataFrame(rows, schema={"retriever": pl.Utf8, "setting": pl.Utf8, "query_id": pl.Utf8,
                                      "ndcg": pl.Float64}, orient="row")


def tie_table(scores, ratings, k: int = 10):
    """Per-(retriever, setting, query) sensitivity of nDCG@k to the order of tied scores:
    ``ndcg_min``, ``ndcg_max`` over all tie orders (:func:`ndcg_tie_range`) and ``tied`` (some tie
    touches the top k, i.e. min < max)."""
    rows = []
    for (r, s, q), g in _joined(scores, ratings).group_by(["retriever", "setting", "query_id"], maintain_order=True):
        lo, hi = ndcg_tie_range(g["rating"].to_numpy(), g["score"].to_numpy(), k)
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


# ----------------------------------------------------------------------------- ties
# nDCG@k when the retriever's scores tie: exact expectation, minimum and maximum over tie orders.
# Same nDCG@k as :func:`saber_lib.evaluate.ndcg_at_k` (gain 2^rel - 1, discount 1/log2(rank + 1),
# ideal DCG over all candidates), but instead of breaking ties by candidate position the
# candidates with equal scores are taken in every order.
#
# Closed form. Sort the distinct scores descending; the candidates sharing a score form a block
# that fills a fixed run of ranks [s, s + m). Under a uniformly random order of the block every
# member is equally likely at each of those ranks, so the block contributes
#
#     E[DCG of block] = mean gain of the block x sum of the discounts of ranks in [s, s + m) that are <= k
#
# (ranks beyond k have discount 0, which handles a block straddling the cut-off). The extreme
# orders follow from the rearrangement inequality: the maximum puts the block's largest gains on
# its earliest ranks, the minimum its smallest. The ideal DCG does not depend on the order.
#
# Scores are tied when exactly equal (no tolerance); round them first if float noise matters.
def _tie_blocks(ratings, scores, k: int):
    rel, s = _checked(ratings, scores, k)
    n = rel.size
    gains = np.exp2(rel) - 1.0
    disc = np.zeros(n)
    m = min(k, n)
    disc[:m] = 1.0 / np.log2(np.arange(2, m + 2, dtype=np.float64))
    ideal = float(np.sort(gains)[::-1] @ disc)
    order = np.argsort(-s, kind="stable")
    ss = s[order]
    # block boundaries in the sorted list: a new block starts where the score changes
    starts = np.flatnonzero(np.r_[True, ss[1:] != ss[:-1]])
    ends = np.r_[starts[1:], n]
    return gains[order], disc, ideal, starts, ends


def expected_ndcg_at_k(ratings, scores, k: int = 10) -> float:
    """Exact mean of nDCG@k over all orders of tied candidates (each order equally likely)."""
    g, disc, ideal, starts, ends = _tie_blocks(ratings, scores, k)
    if ideal <= 0.0:
        return 0.0
    csum_g = np.r_[0.0, np.cumsum(g)]
    csum_d = np.r_[0.0, np.cumsum(disc)]
    sizes = ends - starts
    block_mean_gain = (csum_g[ends] - csum_g[starts]) / sizes
    block_disc = csum_d[ends] - csum_d[starts]
    return float(block_mean_gain @ block_disc) / ideal


def ndcg_tie_range(ratings, scores, k: int = 10) -> tuple[float, float]:
    """(minimum, maximum) of nDCG@k over all orders of tied candidates."""
    g, disc, ideal, starts, ends = _tie_blocks(ratings, scores, k)
    if ideal <= 0.0:
        return 0.0, 0.0
    lo = hi = 0.0
    for a, b in zip(starts, ends):
        if disc[a] == 0.0:      # this block and all later ones lie beyond the cut-off
            break
        blk = np.sort(g[a:b])
        lo += float(blk @ disc[a:b])
        hi += float(blk[::-1] @ disc[a:b])
    return lo / ideal, hi / ideal


def tie_sensitivity(ratings, scores, k: int = 10) -> dict:
    """``expected``, ``min``, ``max`` nDCG@k over tie orders and ``spread`` = max - min
    (0 when no tie touches the top k)."""
    lo, hi = ndcg_tie_range(ratings, scores, k)
    return {"expected": expected_ndcg_at_k(ratings, scores, k), "min": lo, "max": hi, "spread": hi - lo}
