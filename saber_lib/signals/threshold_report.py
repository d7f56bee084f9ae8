"""What the thresholds stage shows of a :func:`thresholds.find_thresholds` result: the per-domain
table, the feasible frontier (long and wide), the frontier plot and the eligible-queries heat maps
(their colour scale, zero cells and Q_min outline are shared with the explorer, ``explorer_ui``).
"""
from __future__ import annotations

from typing import Sequence

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import polars as pl
from matplotlib import patheffects
from matplotlib.collections import LineCollection
from matplotlib.colors import LogNorm
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

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


# ----------------------------------------------------------------------------- eligible-queries heat maps
# Counts span orders of magnitude (thousands of queries at the low-threshold corner, a handful where the
# decision is made), so the maps use a log colour scale from 1 to the largest count, and a cell with
# no eligible query is drawn apart (light grey, never the colour of 1). The region where a domain
# reaches Q_min is outlined, and a second row zooms on the chosen thresholds with its own scale.
ZERO_COLOUR = "#d9d9d9"
BOUNDARY_COLOUR = "#ff1493"          # deep pink: apart from every viridis colour
ZOOM_HALF_WIDTH = 0.15


def count_cmap():
    """The heat maps' colour map: viridis, with masked cells (no eligible query) in :data:`ZERO_COLOUR`."""
    return mpl.colormaps["viridis"].with_extremes(bad=ZERO_COLOUR)


def count_norm(counts) -> LogNorm:
    """A log scale from 1 to the largest of ``counts`` (at least 2, so that a scale exists)."""
    top = int(np.max(counts)) if np.size(counts) else 0
    return LogNorm(vmin=1, vmax=max(2, top))


def masked_counts(grid: np.ndarray) -> np.ma.MaskedArray:
    """A grid ``[i_topic, j_summ]`` as the heat map draws it (summ on the rows), zeros masked."""
    g = np.asarray(grid).T
    return np.ma.masked_where(g == 0, g)


def cell_extent(edges: np.ndarray) -> tuple[float, float, float, float]:
    """The ``imshow`` extent that centres cell ``(i, j)`` on ``(edges[i], edges[j])``."""
    half = (edges[1] - edges[0]) / 2 if len(edges) > 1 else 0.5
    return (edges[0] - half, edges[-1] + half, edges[0] - half, edges[-1] + half)


def feasible_boundary(mask: np.ndarray, edges: np.ndarray) -> list:
    """Segments between grid cells where ``mask[i, j]`` (tau_topic i, tau_summ j) changes: the outline
    of the region where a domain reaches Q_min, on the cells the heat map draws (centred on the grid
    points)."""
    h = (edges[1] - edges[0]) / 2
    segs = []
    di = np.argwhere(mask[1:, :] != mask[:-1, :])      # between (i, j) and (i+1, j): a vertical edge
    segs += [[(edges[i] + h, edges[j] - h), (edges[i] + h, edges[j] + h)] for i, j in di]
    dj = np.argwhere(mask[:, 1:] != mask[:, :-1])      # between (i, j) and (i, j+1): a horizontal edge
    segs += [[(edges[i] - h, edges[j] + h), (edges[i] + h, edges[j] + h)] for i, j in dj]
    return segs


def occupied_box(counts: np.ndarray, edges: np.ndarray, lo_topic: float = 0.0, lo_summ: float = 0.0):
    """``(x0, x1, y0, y1)`` around every cell with a count (``counts[..., i_topic, j_summ]``, any
    leading axes, e.g. domains) at or above the floors ``lo``, one cell of margin; None when there is
    none."""
    e = np.asarray(edges)
    nz = np.asarray(counts).reshape(-1, len(e), len(e)).any(axis=0)
    nz = nz & (e >= lo_topic - 1e-9)[:, None] & (e >= lo_summ - 1e-9)[None, :]
    if not nz.any():
        return None
    i, j = np.flatnonzero(nz.any(axis=1)), np.flatnonzero(nz.any(axis=0))
    step = edges[1] - edges[0]
    return (edges[i[0]] - 1.5 * step, edges[i[-1]] + 1.5 * step, edges[j[0]] - 1.5 * step, edges[j[-1]] + 1.5 * step)


def zoom_window(tau_topic: float, tau_summ: float, half: float, lo_topic: float = 0.0, lo_summ: float = 0.0,
                snap: float = 0.0, occupied=None, min_width: float = 0.0) -> tuple[float, float, float, float]:
    """``(x0, x1, y0, y1)``: the square of half-width ``half`` around the point (its centre rounded to
    a multiple of ``snap`` when ``snap`` > 0), shifted to lie inside ``[lo, 1]`` on each axis; with
    ``occupied`` (:func:`occupied_box`) cut to that box, widened again to hold the point and at least
    ``min_width`` on each axis, so that the window shows counts rather than empty grid."""
    def side(c, lo, box):
        p = c
        if snap > 0:
            c = round(c / snap) * snap
        a, b = c - half, c + half
        if a < lo:
            a, b = lo, min(1.0, lo + 2 * half)
        if b > 1.0:
            a, b = max(lo, 1.0 - 2 * half), 1.0
        if box is not None:
            a, b = max(a, box[0]), min(b, box[1])
            # around the (snapped) centre, so that moves within a snap step keep one window
            a, b = min(a, c - min_width / 2, p), max(b, c + min_width / 2, p)
            if b - a < min_width:
                a, b = a - (min_width - (b - a)) / 2, b + (min_width - (b - a)) / 2
            if a < lo:                                     # shifted back inside [lo, 1], then clipped
                a, b = lo, b + (lo - a)
            if b > 1.0:
                a, b = a - (b - 1.0), 1.0
            a = max(a, lo)
        return a, b

    bx = None if occupied is None else occupied[:2]
    by = None if occupied is None else occupied[2:]
    return (*side(tau_topic, lo_topic, bx), *side(tau_summ, lo_summ, by))


def window_cells(edges: np.ndarray, win) -> tuple[np.ndarray, np.ndarray]:
    """Which grid points' cells (centred on them) overlap the window ``(x0, x1, y0, y1)``: a boolean
    per topic edge and per summary edge."""
    h = (edges[1] - edges[0]) / 2 if len(edges) > 1 else 0.5
    e = np.asarray(edges)
    return (e > win[0] - h) & (e < win[1] + h), (e > win[2] - h) & (e < win[3] + h)


def grid_index(edges: np.ndarray, tau: float) -> int:
    """The grid point a threshold ``tau`` reads: the first edge at or above it (clipped to the grid)."""
    return int(np.clip(np.searchsorted(edges, tau - 1e-12), 0, len(edges) - 1))


def eligible_grid_figure(sw: GridSweep, domains: Sequence[str], K: int, res: dict, Q_min: int | None = None,
                         zoom: float = ZOOM_HALF_WIDTH):
    """Eligible queries at ``K`` over the threshold grid, one panel per domain on one log colour scale
    (so panels compare; grey: no eligible query), the region reaching ``Q_min`` (default
    ``res["Q_min"]``) outlined. With chosen thresholds: the point marked and its count written in
    each panel, and a second row zoomed on it (half-width ``zoom``, cut to the cells with counts,
    :func:`zoom_window`) with a log scale of its own."""
    k = sw.k_index(K)
    E = sw.eligible[k]
    Q_min = res.get("Q_min") if Q_min is None else Q_min
    point = res.get("tau_topic") is not None and res.get("tau_summ") is not None
    rows, D = (2 if point else 1), len(domains)
    fig, axes = plt.subplots(rows, D, figsize=(3 * D + 1.4, 2.9 * rows), squeeze=False, layout="constrained")
    cmap, ext = count_cmap(), cell_extent(sw.edges)
    windows = [(sw.edges[0] - 1, 2, sw.edges[0] - 1, 2)]
    if point:
        windows.append(zoom_window(res["tau_topic"], res["tau_summ"], zoom, float(sw.edges[0]), float(sw.edges[0]),
                                   occupied=occupied_box(E, sw.edges), min_width=8 * (sw.edges[1] - sw.edges[0])))
    for r, (x0, x1, y0, y1) in enumerate(windows):
        inside = window_cells(sw.edges, (x0, x1, y0, y1))
        norm = count_norm(E[:, inside[0]][:, :, inside[1]])
        for d, ax in enumerate(axes[r]):
            im = ax.imshow(masked_counts(E[d]), origin="lower", extent=ext, aspect="auto", cmap=cmap, norm=norm,
                           interpolation="nearest")
            ax.grid(False)
            if Q_min is not None:
                ax.add_collection(LineCollection(feasible_boundary(E[d] >= Q_min, sw.edges), colors=BOUNDARY_COLOUR,
                                                 linewidths=1.8))
            if point:
                t, u = res["tau_topic"], res["tau_summ"]
                ax.plot([t], [u], marker="P", mfc="w", mec="k", ms=9, ls="none")
                n = int(E[d, grid_index(sw.edges, t), grid_index(sw.edges, u)])
                ax.annotate(f"{n}", (t, u), textcoords="offset points", xytext=(5, 5), fontsize=8, color="w",
                            path_effects=[patheffects.withStroke(linewidth=2, foreground="k")])
            if r:
                ax.set_xlim(x0, x1)
                ax.set_ylim(y0, y1)
            else:
                ax.set_xlim(ext[0], ext[1])
                ax.set_ylim(ext[2], ext[3])
            ax.set_title(domains[d] + (" (zoom)" if r else ""), fontsize=8)
            ax.set_xlabel("tau_topic", fontsize=8)
            ax.tick_params(labelsize=7)
        axes[r][0].set_ylabel("tau_summ", fontsize=8)
        fig.colorbar(im, ax=list(axes[r]), label=f"eligible queries (K={K}, log)" + (", zoom" if r else ""),
                     shrink=0.9)
    handles = [Patch(color=ZERO_COLOUR, label="no eligible query")]
    if Q_min is not None:
        handles.append(Line2D([], [], color=BOUNDARY_COLOUR, label=f"outline of >= Q_min = {Q_min}"))
    if point:
        handles.append(Line2D([], [], marker="P", mfc="w", mec="k", ls="none", ms=8, label="chosen thresholds (its count)"))
    fig.legend(handles=handles, loc="outside upper center", ncol=len(handles), fontsize=7, frameon=False)
    return fig
