"""One figure style for the whole workbench: fonts, one colour per candidate group and per domain,
and the two-ring domain/subdomain pie chart (:func:`plot_pie`) the topics and distributions stages draw.

Figures are written by :func:`saber_lib.report.figures.save_figure` (importing that module leaves
the style alone).
"""
from __future__ import annotations

from typing import Sequence

import matplotlib

matplotlib.use("Agg") if not matplotlib.get_backend().lower().startswith(("module://", "nbagg", "ipympl")) else None
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

GROUP_COLORS = {"topic-only": "#4C72B0", "summary-only": "#DD8452", "both": "#55A868"}
GROUP_ORDER = ("topic-only", "summary-only", "both")
DOMAIN_COLORS = {
    "Algebra": "#4C72B0",
    "Geometry": "#DD8452",
    "Number Theory": "#55A868",
    "Combinatorics": "#C44E52",
    "Calculus and Analysis": "#8172B3",
}
DOMAIN_ORDER = tuple(DOMAIN_COLORS)
SCHEDULE_COLORS = {"swiss": "#4C72B0", "random": "#C44E52", "adaptive": "#55A868", "exhaustive": "#333333"}


def use_style() -> None:
    """Apply the workbench's matplotlib style (on import, and once per notebook by the stage context)."""
    plt.rcParams.update({
        "figure.dpi": 110,
        "savefig.dpi": 150,
        "font.family": "DejaVu Sans",
        "font.size": 10,
        "axes.titlesize": 11,
        "axes.labelsize": 10,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "legend.frameon": False,
        "svg.hashsalt": "saber",
    })


use_style()


# ----------------------------------------------------------------------------- pie charts
def _domain_order(domains: Sequence[str]) -> list[str]:
    known = [d for d in DOMAIN_ORDER if d in domains]
    return known + sorted(d for d in domains if d not in known)


def _shade(hex_color: str, k: int, n: int) -> tuple:
    import matplotlib.colors as mc  # only the pie charts need it

    rgb = np.array(mc.to_rgb(hex_color))
    t = 0.15 + 0.55 * (k / max(n - 1, 1))
    return tuple(rgb + (1 - rgb) * t)


def plot_pie(dom_w: pl.DataFrame, sub_w: pl.DataFrame, title: str = "", highlight_subs: set | None = None,
             top_subs: dict | None = None, ax=None, min_label_share: float = 0.03):
    """Two-ring pie: domains inside, subdomains outside (nested, same angular extent).

    ``highlight_subs``: (domain, subdomain) pairs drawn hatched (e.g. the query's own subdomains);
    ``top_subs``: (domain, subdomain) -> weight among the top-ranked candidates; those wedges get a
    black outline and the top-10 weight in their label. Small wedges (< ``min_label_share``) are
    not labelled.
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 6.4))
    total = float(dom_w["weight"].sum())
    order = _domain_order(dom_w["domain"].to_list())
    dweights = {d: w for d, w in dom_w.select("domain", "weight").iter_rows()}
    inner_w = [dweights[d] for d in order]
    inner_c = [DOMAIN_COLORS.get(d, "#BBBBBB") for d in order]
    outer_w, outer_c, outer_lab, outer_keys = [], [], [], []
    for d in order:
        s = sub_w.filter(pl.col("domain") == d)
        for k, (sub, w) in enumerate(s.select("subdomain", "weight").iter_rows()):
            outer_w.append(w)
            outer_c.append(_shade(DOMAIN_COLORS.get(d, "#BBBBBB"), k, s.height))
            outer_lab.append(sub if w / total >= min_label_share else "")
            outer_keys.append((d, sub))
    inner_lab = [d.replace(" and ", " and\n") + f"\n{w / total:.0%}" if w / total >= min_label_share else ""
                 for d, w in zip(order, inner_w)]
    wedges_in, _ = ax.pie(inner_w, radius=0.62, colors=inner_c, startangle=90, counterclock=False, labels=inner_lab,
                          # the middle of the ring (0.20 .. 0.62), not near its inner edge where labels collide
                          labeldistance=0.66, textprops={"fontsize": 7, "ha": "center", "va": "center"},
                          wedgeprops={"width": 0.42, "edgecolor": "white", "linewidth": 0.8})
    wedges_out, _ = ax.pie(outer_w, radius=1.0, colors=outer_c, startangle=90, counterclock=False,
                           labels=outer_lab, labeldistance=1.04, textprops={"fontsize": 6},
                           wedgeprops={"width": 0.38, "edgecolor": "white", "linewidth": 0.5})
    for wedge, key in zip(wedges_out, outer_keys):
        if highlight_subs and key in highlight_subs:
            wedge.set_hatch("////")
            wedge.set_edgecolor("#333333")
        if top_subs and top_subs.get(key, 0) > 0:
            wedge.set_edgecolor("black")
            wedge.set_linewidth(1.6)
            wedge.set_label(None)
    if top_subs:
        for wedge, key, lab in zip(wedges_out, outer_keys, outer_lab):
            if top_subs.get(key, 0) > 0:
                ang = np.deg2rad((wedge.theta1 + wedge.theta2) / 2)
                ax.text(0.81 * np.cos(ang), 0.81 * np.sin(ang), f"{top_subs[key]:.1f}", fontsize=6,
                        ha="center", va="center", fontweight="bold",
                        bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.85})  # readable on hatching
    notes = []
    if highlight_subs:
        notes.append("hatched: the query's own subdomains")
    if top_subs:
        notes.append("black outline, number: weight of the top-ranked candidates")
    if notes:
        ax.text(0.5, -0.02, "; ".join(notes), transform=ax.transAxes, ha="center", va="top", fontsize=7)
    ax.set_title(title, fontsize=10)
    ax.set(aspect="equal")
    return ax
