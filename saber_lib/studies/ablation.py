"""Signal ablation (paper 4.4): where do the candidates of each selection group land in
the final ranking?

Every query has 3K candidates, K from each group g in {topic-only, summary-only, both}. Rank the
candidates of query q by their final rating (descending), rank 1 = best. For a group g and a cutoff
r = 1..3K the pooled cumulative fraction is::

    F_g(r) = sum_q #{c in q : group(c) = g, rank_q(c) <= r} / sum_q #{c in q : group(c) = g}

Uncertainty: a percentile bootstrap over queries (resample queries with replacement, recompute
F_g(r) on the resample; seeded). The paper's finding: "both" rises fastest, summary-only slightly
ahead of topic-only. It is checked here on the area under each curve,
``AUC_g = mean_r F_g(r)`` (1 = every candidate of g ranked first, 0.5 ~ random placement).

Tie order: equal ratings are ordered by Bradley-Terry log-strength ``theta`` (descending), then by
``sha256(query_id + "\\x00" + cand_id)``: deterministic and independent of the group, unlike the
candidate position (positions are sorted by group, so breaking ties by position would favour
topic-only).

Per domain (:func:`domain_curves`): the same pooled curves over the queries of one domain (a query
counts in each of its domains), with their own bootstrap bands and AUCs, so that a domain where one
signal carries the selection shows apart from the pooled picture.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import polars as pl

from ..report import plots
from ..core.seeds import rng_for
from ..metrics.resample import resample_counts

GROUPS = ("topic-only", "summary-only", "both")


def _tie_key(query_id: str, cand_id: str) -> str:
    return hashlib.sha256(f"{query_id}\x00{cand_id}".encode()).hexdigest()


def final_ranks(ratings: pl.DataFrame) -> pl.DataFrame:
    """Add ``rank`` (1 = best) per query: rating desc, then theta desc, then a group-neutral hash.

    ``ratings`` follows the ``tournament/ratings.parquet`` contract (``query_id``, ``cand_id``,
    ``group``, ``rating``; ``theta`` optional).
    """
    need = {"query_id", "cand_id", "group", "rating"}
    missing = need - set(ratings.columns)
    if missing:
        raise ValueError(f"ratings table lacks column(s) {sorted(missing)}")
    bad = set(ratings["group"].unique().to_list()) - set(GROUPS)
    if bad:
        raise ValueError(f"unknown candidate group(s) {sorted(bad)}; expected {list(GROUPS)}")
    df = ratings.with_columns(
        pl.struct("query_id", "cand_id").map_elements(
            lambda s: _tie_key(str(s["query_id"]), str(s["cand_id"])), return_dtype=pl.String
        ).alias("_tie"))
    theta = pl.col("theta") if "theta" in df.columns else pl.lit(0.0)
    df = df.with_columns(theta.cast(pl.Float64).fill_null(0.0).alias("_theta"))
    df = df.sort(["query_id", "rating", "_theta", "_tie"], descending=[False, True, True, False])
    df = df.with_columns(pl.int_range(1, pl.len() + 1).over("query_id").alias("rank"))
    return df.drop("_tie", "_theta")


def group_rank_counts(ranked: pl.DataFrame, n_ranks: int | None = None):
    """Per-query cumulative counts.

    Returns ``(query_ids, counts, totals)`` with ``counts[q, g, r-1]`` = number of candidates of
    group g in query q ranked within the top r (r = 1..n_ranks) and ``totals[q, g]`` the group's
    size in query q. ``n_ranks`` defaults to the largest number of candidates of a query.
    """
    qids = sorted(ranked["query_id"].unique().to_list())
    qidx = {q: i for i, q in enumerate(qids)}
    if n_ranks is None:
        n_ranks = int(ranked["rank"].max()) if ranked.height else 0
    hits = np.zeros((len(qids), len(GROUPS), n_ranks + 1), dtype=np.int64)
    g_index = {g: i for i, g in enumerate(GROUPS)}
    q = np.array([qidx[x] for x in ranked["query_id"].to_list()], dtype=np.int64)
    g = np.array([g_index[x] for x in ranked["group"].to_list()], dtype=np.int64)
    r = np.minimum(ranked["rank"].to_numpy().astype(np.int64), n_ranks)  # beyond n_ranks: never in
    inside = ranked["rank"].to_numpy() <= n_ranks
    np.add.at(hits, (q[inside], g[inside], r[inside]), 1)
    counts = np.cumsum(hits, axis=2)[:, :, 1:]
    totals = np.zeros((len(qids), len(GROUPS)), dtype=np.int64)
    np.add.at(totals, (q, g), 1)
    return qids, counts, totals


def pooled_curves(counts: np.ndarray, totals: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """F_g(r) = sum_q w_q counts[q,g,r] / sum_q w_q totals[q,g]; shape (groups, ranks).

    ``weights`` (length = queries, or (B, queries) for B bootstrap resamples) are query
    multiplicities; default all 1. A group with no candidates gives NaN.
    """
    Q, G, R = counts.shape
    if weights is None:
        weights = np.ones(Q)
    w = np.atleast_2d(np.asarray(weights, dtype=np.float64))
    num = w @ counts.reshape(Q, G * R).astype(np.float64)          # (B, G*R)
    den = w @ totals.astype(np.float64)                            # (B, G)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = num.reshape(-1, G, R) / den[:, :, None]
    return out[0] if np.ndim(weights) == 1 else out


def bootstrap_curves(counts: np.ndarray, totals: np.ndarray, n_resamples: int, seed: int,
                     level: float = 0.95, batch: int = 200):
    """Percentile bootstrap over queries of the pooled curves.

    Returns ``(low, high, aucs)``: band arrays of shape (groups, ranks) and the bootstrap AUCs
    (n_resamples, groups). Queries are resampled with replacement as multiplicities
    (:func:`saber_lib.metrics.resample.resample_counts`, generator ``default_rng(seed)``, or ``seed``
    itself when it is a generator).
    """
    Q = counts.shape[0]
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    curves = []
    for start in range(0, n_resamples, batch):
        b = min(batch, n_resamples - start)
        w = resample_counts(Q, Q, b, rng)
        curves.append(pooled_curves(counts, totals, w))
    allc = np.concatenate(curves, axis=0)                          # (B, G, R)
    alpha = (1.0 - level) / 2.0
    low = np.nanquantile(allc, alpha, axis=0)
    high = np.nanquantile(allc, 1.0 - alpha, axis=0)
    return low, high, np.nanmean(allc, axis=2)


@dataclass
class AblationResult:
    curves: pl.DataFrame      # group, r, frac, low, high
    auc: pl.DataFrame         # group, auc, auc_low, auc_high, n_candidates
    n_queries: int
    n_ranks: int
    findings: dict            # the paper's statements, as measured here


def signal_ablation(ratings: pl.DataFrame, n_resamples: int, seed: int, level: float = 0.95) -> AblationResult:
    """Cumulative-rank curves per group with bootstrap bands, AUCs and the paper's two findings.

    Findings (booleans plus the numbers behind them):
    ``both_rises_fastest``: AUC_both > AUC of each single-signal group;
    ``summary_ahead_of_topic``: AUC_summary-only > AUC_topic-only; and whether each difference's
    bootstrap interval excludes 0 (``*_significant``).
    """
    ranked = final_ranks(ratings)
    qids, counts, totals = group_rank_counts(ranked)
    R = counts.shape[2]
    curve = pooled_curves(counts, totals)
    low, high, boot_auc = bootstrap_curves(counts, totals, n_resamples, seed, level)
    r = np.arange(1, R + 1)
    curves = pl.concat([
        pl.DataFrame({"group": [g] * R, "r": r, "frac": curve[i], "low": low[i], "high": high[i]})
        for i, g in enumerate(GROUPS)])
    auc = np.nanmean(curve, axis=1)
    alpha = (1.0 - level) / 2.0
    auc_df = pl.DataFrame({
        "group": list(GROUPS), "auc": auc,
        "auc_low": np.nanquantile(boot_auc, alpha, axis=0),
        "auc_high": np.nanquantile(boot_auc, 1 - alpha, axis=0),
        "n_candidates": totals.sum(axis=0)})
    gi = {g: i for i, g in enumerate(GROUPS)}

    def diff(a, b):
        d = boot_auc[:, gi[a]] - boot_auc[:, gi[b]]
        lo, hi = np.nanquantile(d, alpha), np.nanquantile(d, 1 - alpha)
        return float(auc[gi[a]] - auc[gi[b]]), float(lo), float(hi)

    d_bt, lo_bt, hi_bt = diff("both", "topic-only")
    d_bs, lo_bs, hi_bs = diff("both", "summary-only")
    d_st, lo_st, hi_st = diff("summary-only", "topic-only")
    findings = {
        "auc": {g: float(auc[gi[g]]) for g in GROUPS},
        "both_minus_topic": [d_bt, lo_bt, hi_bt],
        "both_minus_summary": [d_bs, lo_bs, hi_bs],
        "summary_minus_topic": [d_st, lo_st, hi_st],
        "both_rises_fastest": bool(d_bt > 0 and d_bs > 0),
        "both_rises_fastest_significant": bool(lo_bt > 0 and lo_bs > 0),
        "summary_ahead_of_topic": bool(d_st > 0),
        "summary_ahead_of_topic_significant": bool(lo_st > 0),
        "level": level, "n_resamples": n_resamples,
    }
    return AblationResult(curves=curves, auc=auc_df, n_queries=len(qids), n_ranks=R, findings=findings)


def domain_curves(ratings: pl.DataFrame, query_domains: pl.DataFrame, n_resamples: int, seed: int,
                  level: float = 0.95) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The cumulative-rank curves per domain: ``(curves, auc)``.

    ``query_domains``: ``query_id``, ``query_domains`` (a list; the benchmark's). A query counts in
    each of its domains; domains in ``plots.DOMAIN_ORDER``, then any other by name; a query without
    a domain counts in none. ``curves``: ``domain, group, r, frac, low, high``; ``auc``: ``domain,
    group, n_queries, n_candidates, auc, auc_low, auc_high``. Bands: the percentile bootstrap over the
    domain's queries (stream ``rng_for(seed, "ablation-domain", domain)``). The cutoffs run to the
    largest candidate list of the run, as in :func:`signal_ablation`.
    """
    ranked = final_ranks(ratings)
    qids, counts, totals = group_rank_counts(ranked)
    doms_of = {q: list(d or []) for q, d in query_domains.select("query_id", "query_domains").iter_rows()}
    missing = [q for q in qids if q not in doms_of]
    if missing:
        raise KeyError(f"{len(missing)} rated queries have no domains in the benchmark, e.g. {missing[:3]}")
    present = {d for q in qids for d in doms_of[q]}
    domains = [d for d in plots.DOMAIN_ORDER if d in present] + sorted(present - set(plots.DOMAIN_ORDER))
    R = counts.shape[2]
    r = np.arange(1, R + 1)
    alpha = (1.0 - level) / 2.0
    curve_parts, auc_rows = [], []
    for dom in domains:
        m = np.array([dom in doms_of[q] for q in qids])
        c, t = counts[m], totals[m]
        curve = pooled_curves(c, t)
        low, high, boot_auc = bootstrap_curves(c, t, n_resamples, rng_for(seed, "ablation-domain", dom), level)
        for i, g in enumerate(GROUPS):
            curve_parts.append(pl.DataFrame({"domain": [dom] * R, "group": [g] * R, "r": r, "frac": curve[i],
                                             "low": low[i], "high": high[i]}))
            auc_rows.append({"domain": dom, "group": g, "n_queries": int(m.sum()), "n_candidates": int(t[:, i].sum()),
                             "auc": float(np.nanmean(curve[i])), "auc_low": float(np.nanquantile(boot_auc[:, i], alpha)),
                             "auc_high": float(np.nanquantile(boot_auc[:, i], 1 - alpha))})
    schema = {"domain": pl.String, "group": pl.String, "r": pl.Int64, "frac": pl.Float64, "low": pl.Float64,
              "high": pl.Float64}
    curves = pl.concat(curve_parts) if curve_parts else pl.DataFrame(schema=schema)
    auc = pl.DataFrame(auc_rows, schema={"domain": pl.String, "group": pl.String, "n_queries": pl.Int64,
                                         "n_candidates": pl.Int64, "auc": pl.Float64, "auc_low": pl.Float64,
                                         "auc_high": pl.Float64})
    return curves.with_columns(pl.col("r").cast(pl.Int64)), auc


def plot_domain_curves(curves: pl.DataFrame, auc: pl.DataFrame):
    """One panel per domain of :func:`domain_curves`: each group's curve with its band and the
    random-placement diagonal, titled with the domain's number of queries."""
    import matplotlib.pyplot as plt  # pyplot only once saber_lib.plots has chosen the backend

    doms = auc["domain"].unique(maintain_order=True).to_list()
    fig, axes = plt.subplots(1, max(1, len(doms)), figsize=(2.7 * max(1, len(doms)) + 0.6, 3.0), sharey=True,
                             squeeze=False)
    R = int(curves["r"].max()) if curves.height else 1
    for ax, dom in zip(axes[0], doms):
        n = int(auc.filter(pl.col("domain") == dom)["n_queries"][0])
        view = AblationResult(curves=curves.filter(pl.col("domain") == dom).drop("domain"), auc=auc, n_queries=n,
                              n_ranks=R, findings={})
        plot_curves(view, ax=ax)
        ax.set_title(f"{dom} (n={n})", fontsize=9)
        ax.set_xlabel("rank cutoff r", fontsize=8)
        ax.legend().remove()
        if ax is not axes[0][0]:
            ax.set_ylabel("")
    axes[0][0].legend(loc="lower right", fontsize=7)
    fig.tight_layout()
    return fig


def describe_findings(f: dict) -> str:
    """One plain sentence per paper statement: holds or not here, with the AUC gap and its CI."""
    def part(name, key, d):
        v, lo, hi = f[key]
        state = "holds" if d else "does not hold"
        return f"{name}: {state} here (AUC gap {v:+.3f}, {int(f['level']*100)}% CI [{lo:+.3f}, {hi:+.3f}])"

    a = part("'both' rises fastest (vs topic-only)", "both_minus_topic", f["both_minus_topic"][0] > 0)
    b = part("'both' rises fastest (vs summary-only)", "both_minus_summary", f["both_minus_summary"][0] > 0)
    c = part("summary-only ahead of topic-only", "summary_minus_topic", f["summary_ahead_of_topic"])
    return "\n".join((a, b, c))


def plot_curves(result: AblationResult, ax=None, colors=None):
    """The paper's Figure 3: F_g(r) per group with its bootstrap band, and the diagonal r/3K."""
    import matplotlib.pyplot as plt  # pyplot only once saber_lib.plots has chosen the backend

    colors = colors or plots.GROUP_COLORS
    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 3.6))
    for g in GROUPS:
        d = result.curves.filter(pl.col("group") == g)
        ax.plot(d["r"], d["frac"], color=colors[g], label=g, lw=1.8)
        ax.fill_between(d["r"].to_numpy(), d["low"].to_numpy(), d["high"].to_numpy(), color=colors[g], alpha=0.2, lw=0)
    R = result.n_ranks
    ax.plot([0, R], [0, 1], color="#999999", lw=0.8, ls="--", label="random placement")
    ax.set_xlim(1, R)
    ax.set_ylim(0, 1)
    ax.set_xlabel("rank cutoff r in the final ranking")
    ax.set_ylabel("cumulative fraction of the group")
    ax.legend(loc="lower right")
    return ax
