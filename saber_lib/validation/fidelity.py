"""System-ranking fidelity: does the benchmark order retrievers as graded reference labels do?

On the queries the grades cover (every benchmark candidate graded), every evaluated retriever's
nDCG@k is computed twice with the benchmark's own kernel (``evaluate.tables.ndcg_table``: gain
2^r - 1, ties in candidate order unless the run's tie policy says otherwise): under the run's
ratings, and under the grades mapped onto the ratings' scale (``grade * rating_top / 100``, i.e.
grade / 20 for ratings in [0, 5]). The two system orders are compared by Kendall's tau-b
(``scipy.stats.kendalltau``) and Spearman's rho of the per-retriever means in the main setting
(statement-full); the interval resamples QUERIES: each resample redraws the covered queries with
replacement (``metrics.resample.resample_counts``), recomputes both sets of means and their tau.

Reading: tau >= 0.9 is conventionally "the same ranking"; below about 0.8 the benchmark reorders
systems that the reference separates.

Which systems the ratings favour (:func:`system_bias`): on each query the retrievers are ranked by
nDCG under the ratings and under the grades (average ranks for ties, 1 = best); a retriever's
``rank_shift`` is the mean over queries of its rank under the grades minus under the ratings (> 0:
the ratings place it higher than the grades do), with a percentile interval from the same
resampling of queries. Ranks, not nDCG differences, because the two scales spread systems
differently: a judge that orders everything right but stretches the differences moves no rank. A
retriever whose interval lies above 0 is *favoured* by the judge (promoted on most queries, not by
one), below 0 *disfavoured*: a judge built on a model or a tokenization close to an evaluated
retriever's shows up here, and such a bias carries over to queries not graded, where the tau's
noise does not.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import polars as pl
from scipy import stats

from ..core.seeds import rng_for
from ..judging.judge_base import Judge, _id
from ..judging.outcomes import TIE
from ..evaluate import tables as ev
from ..metrics.resample import percentile_interval, resample_counts
from ..retrieval.registry import is_lexical, lookup

MAIN_SETTING = "statement-full"
TABLE_SCHEMA = {"retriever": pl.String, "setting": pl.String, "n_queries": pl.Int64, "ndcg_ratings": pl.Float64,
                "ndcg_reference": pl.Float64, "rank_shift": pl.Float64, "rank_shift_ci_low": pl.Float64,
                "rank_shift_ci_high": pl.Float64, "queries_up": pl.Int64, "queries_down": pl.Int64}


class GradeJudge(Judge):
    """The grades as a pairwise judge: the better graded candidate wins, equal grades tie (the ceiling
    of the module docstring); ``grades``: ``{(query_id, doc_id): grade}``."""

    name = "the graded reference (ceiling)"

    def __init__(self, grades: dict):
        super().__init__()
        self.grades = grades

    def judge_pairs(self, items):
        out = []
        for q, a, b in items:
            ga, gb = self.grades[(_id(q), _id(a))], self.grades[(_id(q), _id(b))]
            out.append(1 if ga > gb else 2 if gb > ga else TIE)
        return self._count(out)


def reference_ratings(ratings: pl.DataFrame, grades: pl.DataFrame, queries: Sequence[str], top: float) -> pl.DataFrame:
    """The ratings frame (``query_id``, ``cand_id``, ``position``, ``rating``) of ``queries`` with
    each rating replaced by the candidate's grade on the ratings' scale (``grade * top / 100``)."""
    r = ratings.filter(pl.col("query_id").is_in(list(queries))).select("query_id", "cand_id", "position")
    g = grades.select("query_id", pl.col("doc_id").alias("cand_id"), (pl.col("grade") * (top / 100.0)).alias("rating"))
    out = r.join(g, on=["query_id", "cand_id"], how="left")
    if out["rating"].null_count():
        raise ValueError(f"{out['rating'].null_count()} candidates of the covered queries have no grade")
    return out


def ndcg_both_ways(scores: pl.DataFrame, ratings: pl.DataFrame, grades: pl.DataFrame, queries: Sequence[str], *,
                   top: float, k: int = 10, tie_policy: str = "position", gain: str = "exp") -> pl.DataFrame:
    """``retriever``, ``setting``, ``query_id``, ``ndcg_ratings``, ``ndcg_reference`` on ``queries``
    (``gain``: the ratings' nDCG gain; the reference's is always the benchmark's, exp)."""
    q = list(queries)
    sc = scores.filter(pl.col("query_id").is_in(q))
    mine = ratings.filter(pl.col("query_id").is_in(q)).select("query_id", "cand_id", "position", "rating")
    a = ev.ndcg_table(sc, mine, k=k, tie_policy=tie_policy, gain=gain).rename({"ndcg": "ndcg_ratings"})
    b = ev.ndcg_table(sc, reference_ratings(ratings, grades, q, top), k=k, tie_policy=tie_policy)
    return a.join(b.rename({"ndcg": "ndcg_reference"}), on=["retriever", "setting", "query_id"], how="inner"
                  ).sort("retriever", "setting", "query_id")


def fidelity_table(per_query: pl.DataFrame, *, n_resamples: int = 2000, level: float = 0.95, seed: int = 0) -> pl.DataFrame:
    """Per (retriever, setting): the mean nDCG over the covered queries under the ratings and under
    the grades and how much the ratings favour the retriever (:data:`TABLE_SCHEMA`,
    :func:`system_bias`), best under the grades first."""
    means = (per_query.group_by("retriever", "setting")
             .agg(pl.len().cast(pl.Int64).alias("n_queries"), pl.col("ndcg_ratings").mean(), pl.col("ndcg_reference").mean()))
    settings = sorted(per_query["setting"].unique().to_list())
    bias = pl.concat([system_bias(per_query, setting=st, n_resamples=n_resamples, level=level, seed=seed) for st in settings]
                     + [pl.DataFrame(schema=BIAS_SCHEMA)])
    return (means.join(bias, on=["retriever", "setting"], how="left").select(list(TABLE_SCHEMA))
            .sort(["setting", "ndcg_reference", "retriever"], descending=[False, True, False]))


def _tau(x, y) -> float:
    if len(x) < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(stats.kendalltau(x, y).statistic)     # tau-b


def _matrices(per_query: pl.DataFrame, setting: str) -> tuple[list, list, np.ndarray, np.ndarray]:
    """Systems, queries and the systems x queries nDCG matrices under the ratings and the grades."""
    part = per_query.filter(pl.col("setting") == setting)
    systems = sorted(part["retriever"].unique().to_list())
    queries = sorted(part["query_id"].unique().to_list())
    idx_s, idx_q = {s: i for i, s in enumerate(systems)}, {q: i for i, q in enumerate(queries)}
    A, B = np.full((len(systems), len(queries)), np.nan), np.full((len(systems), len(queries)), np.nan)
    for r, q, x, y in part.select("retriever", "query_id", "ndcg_ratings", "ndcg_reference").iter_rows():
        A[idx_s[r], idx_q[q]], B[idx_s[r], idx_q[q]] = x, y
    if np.isnan(A).any() or np.isnan(B).any():
        raise ValueError(f"{setting}: not every retriever has an nDCG on every covered query")
    return systems, queries, A, B


def fidelity_summary(per_query: pl.DataFrame, *, n_resamples: int = 2000, level: float = 0.95,
                     seed: int = 0) -> tuple[dict, pl.DataFrame]:
    """:func:`fidelity_stats` of the main setting and :func:`fidelity_table`, the rank shifts
    computed once for both."""
    table = fidelity_table(per_query, n_resamples=n_resamples, level=level, seed=seed)
    bias = (table.filter(pl.col("setting") == MAIN_SETTING).select(list(BIAS_SCHEMA))
            .sort(["rank_shift", "retriever"], descending=[True, False]))     # system_bias's order
    return fidelity_stats(per_query, n_resamples=n_resamples, level=level, seed=seed, bias=bias), table


def fidelity_stats(per_query: pl.DataFrame, *, setting: str = MAIN_SETTING, n_resamples: int = 2000,
                   level: float = 0.95, seed: int = 0, bias: pl.DataFrame | None = None) -> dict:
    """``kendall_tau`` (tau-b), ``spearman``, ``ci_low``, ``ci_high`` (the tau's percentile
    interval from resampling queries), ``n_systems``, ``n_queries``, ``setting``, and the retrievers
    the ratings ``favoured`` / ``disfavoured`` (:func:`system_bias`; module docstring). Statistics
    are None with fewer than two systems or queries. ``bias``: the setting's :func:`system_bias`,
    when the caller already has it."""
    systems, queries, A, B = _matrices(per_query, setting)
    out = {"setting": setting, "n_systems": len(systems), "n_queries": len(queries), "kendall_tau": None,
           "spearman": None, "ci_low": None, "ci_high": None, "level": level, "n_resamples": int(n_resamples),
           "favoured": [], "disfavoured": []}
    if len(systems) < 2 or len(queries) < 1:
        return out
    if bias is None:
        bias = system_bias(per_query, setting=setting, n_resamples=n_resamples, level=level, seed=seed)
    out.update(favoured=bias.filter(pl.col("rank_shift_ci_low") > BIAS_EPS)["retriever"].to_list(),
               disfavoured=bias.filter(pl.col("rank_shift_ci_high") < -BIAS_EPS)["retriever"].to_list())
    a, b = A.mean(axis=1), B.mean(axis=1)
    tau = _tau(a, b)
    rho = float(stats.spearmanr(a, b).statistic) if np.ptp(a) > 0 and np.ptp(b) > 0 else float("nan")
    out.update(kendall_tau=None if np.isnan(tau) else tau, spearman=None if np.isnan(rho) else rho)
    if len(queries) >= 2 and n_resamples > 0:
        W = resample_counts(len(queries), len(queries), n_resamples, rng_for(seed, "system fidelity", setting))
        ra, rb = (W @ A.T) / len(queries), (W @ B.T) / len(queries)
        taus = np.array([_tau(x, y) for x, y in zip(ra, rb)])
        taus = taus[np.isfinite(taus)]
        if taus.size:
            lo, hi = percentile_interval(taus, level)
            out.update(ci_low=float(lo), ci_high=float(hi))
    return out


#: an interval bound within this of 0 touches 0 (means of rank differences carry ~1e-16 of rounding)
BIAS_EPS = 1e-12
BIAS_SCHEMA = {"retriever": pl.String, "setting": pl.String, "rank_shift": pl.Float64, "rank_shift_ci_low": pl.Float64,
               "rank_shift_ci_high": pl.Float64, "queries_up": pl.Int64, "queries_down": pl.Int64}


def system_bias(per_query: pl.DataFrame, *, setting: str = MAIN_SETTING, n_resamples: int = 2000,
                level: float = 0.95, seed: int = 0) -> pl.DataFrame:
    """Per retriever of ``setting`` (:data:`BIAS_SCHEMA`, most favoured first): ``rank_shift``, the
    mean over queries of its rank among the setting's retrievers under the grades minus under the
    ratings; its percentile interval over resampled queries (None with one query); on how many
    queries the ratings place it higher (``queries_up``) and lower (``queries_down``) than the
    grades (module docstring)."""
    systems, queries, A, B = _matrices(per_query, setting)
    if not systems:
        return pl.DataFrame(schema=BIAS_SCHEMA)
    S = stats.rankdata(-B, axis=0) - stats.rankdata(-A, axis=0)       # per query, 1 = best; > 0: promoted
    shift = S.mean(axis=1)
    lo = hi = [None] * len(systems)
    if len(queries) >= 2 and n_resamples > 0:
        W = resample_counts(len(queries), len(queries), n_resamples, rng_for(seed, "system bias", setting))
        lo, hi = percentile_interval((W @ S.T) / len(queries), level)
        lo, hi = [float(x) for x in lo], [float(x) for x in hi]
    rows = [{"retriever": s, "setting": setting, "rank_shift": float(shift[i]), "rank_shift_ci_low": lo[i],
             "rank_shift_ci_high": hi[i], "queries_up": int((S[i] > BIAS_EPS).sum()),
             "queries_down": int((S[i] < -BIAS_EPS).sum())} for i, s in enumerate(systems)]
    return pl.DataFrame(rows, schema=BIAS_SCHEMA).sort(["rank_shift", "retriever"], descending=[True, False])


def _lexical(name: str) -> bool:
    """Whether ``name`` is a registered lexical retriever (a name the registry does not know: no)."""
    return lookup(name) is not None and is_lexical(name)


def fidelity_figure(table: pl.DataFrame, summary: dict, *, ax, setting: str = MAIN_SETTING):
    """Each retriever's nDCG under the run's ratings (y) against under the grades (x), with the
    diagonal; lexical systems drawn as squares."""
    part = table.filter(pl.col("setting") == setting)
    x, y, names = part["ndcg_reference"].to_numpy(), part["ndcg_ratings"].to_numpy(), part["retriever"].to_list()
    lex = np.array([_lexical(n) for n in names], dtype=bool)
    ax.scatter(x[~lex], y[~lex], marker="o", color="C0", label="dense / other")
    if lex.any():
        ax.scatter(x[lex], y[lex], marker="s", color="C1", label="lexical")
    for xi, yi, n in zip(x, y, names):
        ax.annotate(n, (xi, yi), fontsize=7, xytext=(3, 2), textcoords="offset points")
    lo = float(min(x.min(), y.min())) if len(x) else 0.0
    hi = float(max(x.max(), y.max())) if len(x) else 1.0
    pad = 0.03 * (hi - lo or 1.0)
    ax.plot([lo - pad, hi + pad], [lo - pad, hi + pad], color="grey", lw=0.8, ls="--", label="same score")
    ax.set_xlabel("nDCG@10 under the graded reference")
    ax.set_ylabel("nDCG@10 under the run's ratings")
    tau = summary.get("kendall_tau")
    if tau is not None:
        ci = (f" [{summary['ci_low']:.2f}, {summary['ci_high']:.2f}]" if summary.get("ci_low") is not None else "")
        ax.set_title(f"{setting}: Kendall tau-b {tau:.2f}{ci}, {summary['n_systems']} systems, "
                     f"{summary['n_queries']} queries", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    return ax


def rank_shift_figure(table: pl.DataFrame, *, ax, setting: str = MAIN_SETTING):
    """Each retriever's rank shift (:func:`system_bias`) with its interval, most favoured on top;
    favoured retrievers (interval above 0) in red, disfavoured (below 0) in blue."""
    part = table.filter(pl.col("setting") == setting).sort(["rank_shift", "retriever"], descending=[False, True])
    y = np.arange(part.height)
    shift = part["rank_shift"].to_numpy()
    lo = part["rank_shift_ci_low"].fill_null(np.nan).to_numpy()
    hi = part["rank_shift_ci_high"].fill_null(np.nan).to_numpy()
    colors = ["C3" if low > BIAS_EPS else "C0" if high < -BIAS_EPS else "0.6" for low, high in zip(lo, hi)]
    ax.barh(y, shift, color=colors)
    err = np.vstack([shift - lo, hi - shift])
    ok = np.isfinite(err).all(axis=0)
    ax.errorbar(shift[ok], y[ok], xerr=err[:, ok], fmt="none", ecolor="black", elinewidth=0.8, capsize=2)
    ax.axvline(0, color="grey", lw=0.8)
    ax.set_yticks(y, part["retriever"].to_list(), fontsize=7)
    ax.set_xlabel("rank shift: grades' rank - ratings' rank, mean over queries")
    ax.set_title("moved up (red) / down (blue) by the ratings, 95% interval", fontsize=9)
    return ax

