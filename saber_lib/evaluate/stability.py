"""Query-set stability as tables and a figure (kernels: :mod:`saber_lib.metrics.stability`): how
far an order of systems measured on n queries can be trusted, for the evaluate stage's own
retrievers (``evaluate/stability.parquet``, n up to half the queries) and for the published
results (``saber leaderboard --stability``).

Frames (polars):

* stability: ``setting``, ``n``, ``tau_mean``, ``tau_median``, ``tau_p5`` (split-half Kendall
  tau-b), ``swap_rate``, ``discriminative_power`` (share of system pairs with p < alpha under the
  paired sign-flip test) with ``discriminative_power_holm``, ``discriminative_power_bootstrap``,
  ``discriminative_power_bootstrap_holm``, ``n_systems``, ``n_queries`` (queries every system
  scored), ``n_splits``, ``n_subsets``;
* swaps: ``setting``, ``n``, ``diff_low``, ``diff_high``, ``pairs``, ``swaps``, ``swap_rate`` (the
  swap rate binned by the difference of means on the first half);
* needed: ``setting``, ``statistic`` (``tau_median`` | ``tau_p5`` | ``tau_mean``), ``target``,
  ``n_needed``, ``extrapolated``, ``fit_a``, ``fit_b`` (``1 - tau = a n^-b``).
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np
import polars as pl

from ..metrics import stability as stb

STABILITY_SCHEMA = {"setting": pl.Utf8, "n": pl.Int64, "tau_mean": pl.Float64, "tau_median": pl.Float64,
                    "tau_p5": pl.Float64, "swap_rate": pl.Float64, "discriminative_power": pl.Float64,
                    "discriminative_power_holm": pl.Float64, "discriminative_power_bootstrap": pl.Float64,
                    "discriminative_power_bootstrap_holm": pl.Float64, "n_systems": pl.Int64, "n_queries": pl.Int64,
                    "n_splits": pl.Int64, "n_subsets": pl.Int64}
SWAP_SCHEMA = {"setting": pl.Utf8, "n": pl.Int64, "diff_low": pl.Float64, "diff_high": pl.Float64, "pairs": pl.Int64,
               "swaps": pl.Int64, "swap_rate": pl.Float64}
NEEDED_SCHEMA = {"setting": pl.Utf8, "statistic": pl.Utf8, "target": pl.Float64, "n_needed": pl.Float64,
                 "extrapolated": pl.Boolean, "fit_a": pl.Float64, "fit_b": pl.Float64}
NEEDED_STATISTICS = ("tau_median", "tau_p5", "tau_mean")
MAIN_SETTING = "statement-full"


def complete_queries(X: np.ndarray) -> np.ndarray:
    """The columns (queries) of a systems x queries matrix that every system scored (no NaN)."""
    X = np.asarray(X, dtype=np.float64)
    return X[:, ~np.isnan(X).any(axis=0)]


def retriever_matrix(ndcg: pl.DataFrame, setting: str) -> tuple[list[str], np.ndarray]:
    """Retrievers and their retrievers x queries nDCG matrix in ``setting`` of an ``ndcg.parquet``
    frame (NaN where a retriever has no row for a query)."""
    part = ndcg.filter(pl.col("setting") == setting)
    wide = part.pivot(on="query_id", index="retriever", values="ndcg").sort("retriever")
    names = wide["retriever"].to_list()
    cols = sorted(c for c in wide.columns if c != "retriever")
    return names, wide.select(cols).to_numpy().astype(np.float64) if cols else np.zeros((len(names), 0))


def stability_frames(matrices: Mapping[str, np.ndarray], *, n_splits: int, n_subsets: int, n_permutations: int,
                     alpha: float, target: float, seed: int, ns: Sequence[int] | None = None, limit_half: bool = True,
                     progress: bool = False) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(stability, swaps, needed) frames (module docstring) of each setting's systems x queries
    matrix (queries some system left unscored are dropped). ``ns``: query counts (default
    :func:`saber_lib.metrics.stability.query_counts` up to half the queries; with ``limit_half``
    False, also every query, for the discriminative power)."""
    rows, bins, need = [], [], []
    for setting, X in matrices.items():
        X = complete_queries(X)
        Q = X.shape[1]
        counts = list(ns) if ns is not None else stb.query_counts(Q) + ([] if limit_half or Q < 1 else [Q])
        counts = [n for n in counts if 1 <= n <= Q]
        r, b = stb.stability_rows(X, counts, n_splits=n_splits, n_subsets=n_subsets, n_permutations=n_permutations,
                                  alpha=alpha, seed=seed, progress=progress)
        rows += [{"setting": setting, **x} for x in r]
        bins += [{"setting": setting, **x} for x in b]
        measured = [x for x in r if x["n_splits"]]
        for stat in NEEDED_STATISTICS:
            got = stb.queries_needed([x["n"] for x in measured], [x[stat] for x in measured], target)
            need.append({"setting": setting, "statistic": stat, **got})
    return (pl.DataFrame(rows, schema=STABILITY_SCHEMA), pl.DataFrame(bins, schema=SWAP_SCHEMA),
            pl.DataFrame(need, schema=NEEDED_SCHEMA))


def needed_phrase(needed: pl.DataFrame, setting: str = MAIN_SETTING) -> str:
    """``median tau >= T from about N queries (extrapolated), 5th percentile from about M`` of a setting."""
    part = {r["statistic"]: r for r in needed.filter(pl.col("setting") == setting).iter_rows(named=True)}
    if not part:
        return f"{setting}: no split-half measurement"

    def one(stat, label):
        r = part.get(stat)
        if r is not None and r["n_needed"] is None and r["extrapolated"]:
            return f"{label}: not within {stb.HORIZON}x the measured queries (the fitted curve is nearly flat)"
        if r is None or r["n_needed"] is None or not math.isfinite(r["n_needed"]):
            return f"{label}: not reached (no rising fit)"
        return f"{label} from about {r['n_needed']:.0f} queries" + (" (extrapolated)" if r["extrapolated"] else "")

    target = next(iter(part.values()))["target"]
    return f"split-half tau {target:g}: " + "; ".join(one(s, l) for s, l in (("tau_median", "median"),
                                                                          ("tau_p5", "5th percentile")))


def stability_figure(frame: pl.DataFrame, setting: str, alpha: float, title: str = ""):
    """Two panels against the query count n (log axis): the split-half tau (mean, median, the 5th
    percentile shaded below the median) and the discriminative power (sign-flip and bootstrap, raw
    and Holm-adjusted)."""
    import matplotlib.pyplot as plt  # pyplot only once the caller has chosen the backend
    import seaborn as sns            # figures only

    part = frame.filter(pl.col("setting") == setting).sort("n")
    fig, (ax_t, ax_d) = plt.subplots(1, 2, figsize=(10, 3.8))
    sh = part.filter(pl.col("n_splits") > 0)
    if sh.height:
        n = sh["n"].to_numpy()
        ax_t.fill_between(n, sh["tau_p5"].to_numpy(), sh["tau_median"].to_numpy(), alpha=0.25, color="C0",
                          label="5th percentile to median")
        long = sh.unpivot(index="n", on=["tau_mean", "tau_median", "tau_p5"], variable_name="statistic",
                          value_name="tau").to_pandas()
        sns.lineplot(data=long, x="n", y="tau", hue="statistic", style="statistic", markers=True, ax=ax_t)
    ax_t.axhline(0.9, color="grey", lw=0.8, ls="--")
    ax_t.set_xscale("log")
    ax_t.set_xlabel("queries per half (n)")
    ax_t.set_ylabel("split-half Kendall tau-b")
    ax_t.set_title(f"{setting}: two disjoint sets of n queries", fontsize=9)
    dp = part.filter(pl.col("n_subsets") > 0)
    if dp.height:
        cols = {"discriminative_power": "sign-flip", "discriminative_power_holm": "sign-flip, Holm",
                "discriminative_power_bootstrap": "bootstrap", "discriminative_power_bootstrap_holm": "bootstrap, Holm"}
        long = (dp.unpivot(index="n", on=list(cols), variable_name="test", value_name="share")
                .with_columns(pl.col("test").replace(cols)).to_pandas())
        sns.lineplot(data=long, x="n", y="share", hue="test", style="test", markers=True, ax=ax_d)
    ax_d.set_xscale("log")
    ax_d.set_ylim(-0.02, 1.02)
    ax_d.set_xlabel("queries (n)")
    ax_d.set_ylabel(f"share of system pairs with p < {alpha:g}")
    ax_d.set_title(f"discriminative power ({int(part['n_systems'].max() or 0)} systems)", fontsize=9)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig


def settings_matrices(ndcg: pl.DataFrame, settings: Sequence[str]) -> dict[str, np.ndarray]:
    """Each setting's retrievers x queries nDCG matrix (:func:`retriever_matrix`), settings with rows only."""
    out = {}
    for s in settings:
        names, X = retriever_matrix(ndcg, s)
        if names:
            out[s] = X
    return out


def write_stability(ctx, ndcg: pl.DataFrame, params: Mapping, caption_tail: str, backends: str) -> pl.DataFrame:
    """The evaluate stage's stability of its own retrievers: ``stability.parquet``,
    ``stability_swaps.parquet``, ``stability_needed.parquet``, the table ``evaluate_stability``
    and per setting the figure ``stability_<setting>``. ``params``: the notebook's parameters
    (``settings``, ``seed`` and the ``stability_*`` keys). Returns the stability frame."""
    p = params
    frame, swaps, needed = stability_frames(
        settings_matrices(ndcg, p["settings"]), n_splits=p["stability_splits"], n_subsets=p["stability_subsets"],
        n_permutations=p["stability_permutations"], alpha=p["stability_alpha"], target=p["stability_target"],
        seed=p["seed"])
    frame.write_parquet(ctx.path("stability.parquet"))
    swaps.write_parquet(ctx.path("stability_swaps.parquet"))
    needed.write_parquet(ctx.path("stability_needed.parquet"))
    how = (f"{p['stability_splits']} seeded random splits into two disjoint halves of n queries each (n up to half "
           f"the queries every retriever scored); discriminative power: share of retriever pairs with p < "
           f"{p['stability_alpha']:g} (paired sign-flip and shifted bootstrap tests, {p['stability_permutations']} "
           f"draws; Holm over the pairs), mean over {p['stability_subsets']} random query subsets of size n")
    ctx.save_table(frame.drop("n_subsets"), "evaluate_stability", float_fmt="{:.3f}", caption=(
        f"Query-set stability of the retrievers' order by nDCG: split-half Kendall tau-b (mean, median, 5th "
        f"percentile) and swap rate over {how}. {needed_phrase(needed)}. " + caption_tail))
    for setting in frame["setting"].unique(maintain_order=True).to_list():
        fig = stability_figure(frame, setting, p["stability_alpha"])
        ctx.save_figure(fig, f"stability_{setting}", backends=backends, caption=(
            f"Split-half Kendall tau and discriminative power against the query count ({setting}; {how}). "
            + caption_tail))
    return frame
