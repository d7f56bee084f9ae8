"""What the thresholds stage shows of a :func:`thresholds.find_thresholds` result: the per-domain
table, the feasible frontier (long and wide), the frontier plot and the eligible-queries heat maps.
"""
from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
import polars as pl

from .thresholds import GridSweep


def per_domain_table(res: dict) -> pl.DataFrame:
    """One row per domain with its scalar entries (nested dicts left out), domains in result order."""
    return pl.DataFrame([{"domain": d, **{k: v for k, v in x.items() if not isinstance(v, dict)}}
                         for d, x in res["per_domain"].items()])


def frontier_long(res: dict) -> pl.DataFrame:
    """The feasible frontier, one row per (domain, K) with ``max_queries`` and where it is reached."""
    return pl.DataFrame([{"domain": d, **r} for d, rows in res["frontier"].items() for r in rows])


def frontier_wide(front: pl.DataFrame) -> pl.DataFrame:
    """``max_queries`` of :func:`frontier_long` with one row per K and one column per domain."""
    return front.pivot(on="domain", index="K", values="max_queries")


def frontier_figure(front: pl.DataFrame, domains: Sequence[str], K: int, Q_min: int):
    """Most eligible queries per domain against K (log K, symlog counts), the chosen K and Q_min dotted."""
    fig, ax = plt.subplots(figsize=(5, 3.4))
    for d in domains:
        f = front.filter(pl.col("domain") == d)
        ax.plot(f["K"], f["max_queries"], marker="o", ms=3, label=d)
    ax.axhline(Q_min, color="k", ls=":", lw=1)
    ax.axvline(K, color="k", ls=":", lw=1)
    ax.set_xscale("log")
    ax.set_yscale("symlog", linthresh=1)
    ax.set_ylim(bottom=0)   # counts: no negative side
    ax.set_xlabel("K")
    ax.set_ylabel("max eligible queries (symlog)")
    ax.legend(fontsize=7)
    return fig


def eligible_grid_figure(sw: GridSweep, domains: Sequence[str], K: int, res: dict):
    """Eligible queries at ``K`` over the threshold grid, one panel per domain on one colour scale
    (so panels compare), the chosen thresholds marked with + when there are any."""
    k = sw.k_index(K)
    fig, axes = plt.subplots(1, len(domains), figsize=(3 * len(domains) + 1, 2.8), sharey=True, layout="constrained")
    vmax = max(1, int(sw.eligible[k].max()))
    for d, ax in enumerate(axes):
        im = ax.imshow(sw.eligible[k, d].T, origin="lower", extent=(0, 1, 0, 1), aspect="auto", cmap="magma",
                       vmin=0, vmax=vmax)
        ax.grid(False)
        ax.set_title(domains[d], fontsize=8)
        ax.set_xlabel("tau_topic")
        if res["tau_topic"] is not None:
            ax.plot([res["tau_topic"]], [res["tau_summ"]], "c+", ms=10)
    axes[0].set_ylabel("tau_summ")
    fig.colorbar(im, ax=axes, label=f"eligible queries (K={K})", shrink=0.9)
    return fig
