"""The select stage's table and figure (what ``06_select`` shows beside the selected benchmark): the
queries per domain against their quota, and the signals of the selected candidates by group."""
from __future__ import annotations

import polars as pl

from ..report.plots import GROUP_COLORS
from ..signals.thresholds import GROUPS

import matplotlib.pyplot as plt  # noqa: E402  (after report.plots has chosen the backend)


def domain_table(rep: dict, domains) -> pl.DataFrame:
    """One row per domain: its quota, eligible queries, selected queries and shortfall (from the
    selection report of :func:`saber_lib.selection.benchmark.select_benchmark`)."""
    return pl.DataFrame([{"domain": d, "quota": rep["quota"][d], "eligible": rep["eligible_queries"][d],
                          "selected": rep["selected"][d], "shortfall": rep["shortfall"][d]} for d in domains])


def selected_candidates_figure(bench: pl.DataFrame, th: dict):
    """Scatter of the selected candidates' topic and summary similarities, one colour per group,
    with the two thresholds dotted."""
    fig, ax = plt.subplots(figsize=(4.6, 3.6))
    for g in GROUPS:
        c = GROUP_COLORS[g]
        sub = bench.filter(pl.col("group") == g)
        ax.scatter(sub["sim_topic"], sub["sim_summ"], s=4, alpha=0.5, label=g, color=c)
    ax.axvline(th["tau_topic"], color="k", lw=0.8, ls=":"); ax.axhline(th["tau_summ"], color="k", lw=0.8, ls=":")
    ax.set_xlabel("sim_topic"); ax.set_ylabel("sim_summ"); ax.legend(fontsize=7)
    return fig
