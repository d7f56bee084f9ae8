"""The threshold explorer's figure and widget (``05_thresholds``); the numbers come from
:class:`saber_lib.signals.explorer.ExplorerModel`.

The figure: per domain the eligible-queries grid of the current K (``imshow``, the log colour scale
and grey empty cells of :mod:`~saber_lib.signals.threshold_report`) with the feasible region's
boundary (cell edges where ``E_d >= Q_min`` changes), a crosshair at the current thresholds and the
domain's count there; on the right the feasible frontier (most eligible queries per domain against K)
with the current point of each domain. The zoom button frames the heat maps on the current point. The axes are drawn once, the heat maps once per K, the boundaries per (K, Q_min); a slider move restores that and draws only the
crosshairs and points (Agg blitting), then encodes a JPEG, so an update costs milliseconds.
"""
from __future__ import annotations

import html
import io
import time
from pathlib import Path

import ipywidgets as widgets
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection
from matplotlib import patheffects
from matplotlib.figure import Figure
from PIL import Image

from ..report.plots import DOMAIN_COLORS
from .explorer import ExplorerModel, PointState, write_threshold_profile
from .threshold_report import (BOUNDARY_COLOUR, ZOOM_HALF_WIDTH, cell_extent, count_cmap, count_norm,
                               feasible_boundary, masked_counts, occupied_box, window_cells, zoom_window)
from .thresholds import frontier

CROSSHAIR = "#ff7f0e"     # orange: apart from the viridis colours, the grey of empty cells and the pink outline


class ExplorerFigure:
    """Heat maps + frontier; :meth:`image` renders the current point (fast path after the first call).

    ``zoom`` (None, or a half-width in threshold units): the heat maps frame the current point in a
    window that moves in steps of half the half-width (:func:`threshold_report.zoom_window`), so that a
    slider move inside a window stays on the fast path; each window has a colour scale of its own.
    """

    _CACHE = 48          # cached backgrounds (windows, and windows x K) before they are dropped

    def __init__(self, model: ExplorerModel, dpi: int = 72):
        self.model = model
        D = len(model.domains)
        self.fig = Figure(figsize=(2.45 * D + 3.6, 2.9), dpi=dpi)
        self.canvas = FigureCanvasAgg(self.fig)
        gs = self.fig.add_gridspec(1, D + 1, width_ratios=[1] * D + [1.45], left=0.04, right=0.99,
                                   bottom=0.17, top=0.86, wspace=0.28)
        self.axes = [self.fig.add_subplot(gs[0, d]) for d in range(D)]
        self.ax_front = self.fig.add_subplot(gs[0, D])
        sw = model.sweep
        e = model.edges
        self.lo_t, self.lo_s = model.floor_topic, model.floor_summ
        self.zoom: float | None = None
        self._full = (self.lo_t, 1.0, self.lo_s, 1.0)
        self._window = None
        self._static_key = None
        self._background = None
        self._images, self._layers, self._bases, self._occupied = [], {}, {}, {}
        cmap = count_cmap()
        for d, ax in enumerate(self.axes):
            im = ax.imshow(np.ma.masked_all((len(e), len(e))), origin="lower", extent=cell_extent(e), aspect="auto",
                           cmap=cmap, norm=count_norm(sw.eligible), interpolation="nearest", animated=True)
            self._images.append(im)
            ax.grid(False)
            ax.set_xlabel("tau_topic", fontsize=8)
            ax.tick_params(labelsize=7)
            if d == 0:
                ax.set_ylabel("tau_summ", fontsize=8)
        self._bounds = [ax.add_collection(LineCollection([], colors=BOUNDARY_COLOUR, linewidths=1.5, animated=True))
                        for ax in self.axes]
        # animated artists: drawn on top of the cached background at every update
        self.vlines = [ax.axvline(0.5, color=CROSSHAIR, lw=1.1, animated=True) for ax in self.axes]
        self.hlines = [ax.axhline(0.5, color=CROSSHAIR, lw=1.1, animated=True) for ax in self.axes]
        self.counts = [ax.annotate("", (0.5, 0.5), textcoords="offset points", xytext=(4, 4), fontsize=8, color="w",
                                   path_effects=[patheffects.withStroke(linewidth=2, foreground="k")], animated=True)
                       for ax in self.axes]
        for ax, name in zip(self.axes, model.domains):
            ax.set_title(name, fontsize=8)
        self.points = {name: self.ax_front.plot([], [], "o", ms=8, mec="k", color=DOMAIN_COLORS.get(name, "k"),
                                                animated=True)[0] for name in model.domains}
        self.ax_front.set_title("feasible frontier; dots: the current point", fontsize=8)
        self.front = frontier(sw, model.floor_topic, model.floor_summ)
        ax = self.ax_front
        for name, rows in self.front.items():
            ax.plot([r["K"] for r in rows], [r["max_queries"] for r in rows], lw=1, marker=".", ms=3,
                    color=DOMAIN_COLORS.get(name, None), label=name)
        self.qline = ax.axhline(1, color="k", ls=":", lw=1, animated=True)
        self.kline = ax.axvline(1, color="k", ls=":", lw=1, animated=True)
        ax.set_xscale("log")
        ax.set_yscale("symlog", linthresh=1)
        ax.set_ylim(bottom=0)
        ax.set_xlabel("K", fontsize=8)
        ax.set_ylabel("eligible queries", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=6, loc="lower left")
        self.fig.suptitle("eligible queries per domain at the current K (log colour, grey: none; pink outline: "
                          "E >= Q_min); orange crosshair: the current thresholds, their count beside it", fontsize=9)
        self._set_window(self._full)
        for K in model.k_options():          # every K's heat maps up front: a K move then only draws lines
            self._image_layer(K)

    def _set_window(self, win) -> None:
        """Frame the heat maps on ``win`` (x0, x1, y0, y1); the axes are drawn once per window (cached)."""
        if win == self._window:
            return
        for ax in self.axes:
            ax.set_xlim(win[0], win[1])
            ax.set_ylim(win[2], win[3])
        if win not in self._bases:
            if len(self._bases) >= self._CACHE or len(self._layers) >= self._CACHE:
                keep = self._full
                self._bases = {w: b for w, b in self._bases.items() if w == keep}
                self._layers = {k: v for k, v in self._layers.items() if k[0] == keep}
            self.canvas.draw()
            self._bases[win] = self.canvas.copy_from_bbox(self.fig.bbox)
        self._window = win
        self._static_key = None

    def _image_layer(self, K: int):
        """The current window's base with the heat maps of ``K`` drawn on it, on a log scale over the
        counts the window shows (cached per window and K)."""
        key = (self._window, K)
        if key not in self._layers:
            m = self.model
            k = m.sweep.k_index(K) if K in m.k_options() else None
            E = m.sweep.eligible[k] if k is not None else np.zeros((len(self.axes), len(m.edges), len(m.edges)), int)
            cols, rows = window_cells(m.edges, self._window)
            norm = count_norm(E[:, cols][:, :, rows])
            self.canvas.restore_region(self._bases[self._window])
            for d, (ax, im) in enumerate(zip(self.axes, self._images)):
                im.set_norm(norm)
                im.set_data(masked_counts(E[d]))
                ax.draw_artist(im)
            self._layers[key] = (self.canvas.copy_from_bbox(self.fig.bbox), norm, E)
        layer, norm, E = self._layers[key]
        if self._images[0].norm is not norm:        # the images say what the cached layer shows
            for d, im in enumerate(self._images):
                im.set_norm(norm)
                im.set_data(masked_counts(E[d]))
        return layer

    def _draw_static(self, K: int, Q_min: int) -> None:
        """Heat maps of K, the boundary of E >= Q_min per domain (cell edges), the K and Q_min lines."""
        m = self.model
        k = m.sweep.k_index(K) if K in m.k_options() else None
        self.canvas.restore_region(self._image_layer(K))
        for d, (ax, lc) in enumerate(zip(self.axes, self._bounds)):
            lc.set_segments(feasible_boundary(m.sweep.eligible[k, d] >= Q_min, m.edges) if k is not None else [])
            ax.draw_artist(lc)
        self.qline.set_ydata([Q_min, Q_min])
        self.kline.set_xdata([K, K])
        self.ax_front.draw_artist(self.qline)
        self.ax_front.draw_artist(self.kline)
        self._background = self.canvas.copy_from_bbox(self.fig.bbox)
        self._static_key = (K, Q_min, self._window)

    def window(self, st: PointState) -> tuple:
        """The heat maps' frame at ``st``: the whole grid, or with ``zoom`` the window around the point,
        cut to the cells with counts at its K (:func:`threshold_report.zoom_window`)."""
        if self.zoom is None:
            return self._full
        m = self.model
        if st.K not in self._occupied:
            self._occupied[st.K] = (occupied_box(m.sweep.eligible[m.sweep.k_index(st.K)], m.edges, self.lo_t, self.lo_s)
                                    if st.K in m.k_options() else None)
        return zoom_window(st.tau_topic, st.tau_summ, self.zoom, self.lo_t, self.lo_s, snap=self.zoom / 2,
                           occupied=self._occupied[st.K], min_width=8 * (m.edges[1] - m.edges[0]))

    def image(self, st: PointState) -> bytes:
        """The figure at ``st`` as JPEG bytes."""
        self._set_window(self.window(st))
        if self._static_key != (st.K, st.Q_min, self._window):
            self._draw_static(st.K, st.Q_min)
        self.canvas.restore_region(self._background)
        for d, (ax, name) in enumerate(zip(self.axes, self.model.domains)):
            self.vlines[d].set_xdata([st.tau_topic, st.tau_topic])
            self.hlines[d].set_ydata([st.tau_summ, st.tau_summ])
            self.counts[d].xy = (st.tau_topic, st.tau_summ)
            self.counts[d].set_text(str(st.eligible[name]))
            for a in (self.vlines[d], self.hlines[d], self.counts[d]):
                ax.draw_artist(a)
        for name, p in self.points.items():
            p.set_data([st.K], [st.eligible[name]])
            self.ax_front.draw_artist(p)
        buf = io.BytesIO()
        Image.frombuffer("RGBA", self.canvas.get_width_height(), self.canvas.buffer_rgba(), "raw", "RGBA", 0, 1
                         ).convert("RGB").save(buf, format="JPEG", quality=90)   # 10x faster than PNG here
        return buf.getvalue()


def table_html(st: PointState) -> str:
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in r.values()) + "</tr>"
        for r in st.table.iter_rows(named=True))
    head = "".join(f"<th>{html.escape(c)}</th>" for c in st.table.columns)
    return f"<table class='saber-explorer-table'><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def _fmt(v) -> str:
    if isinstance(v, bool):
        return "yes" if v else "NO"
    return f"{v:g}" if isinstance(v, float) else str(v)


def caption_html(figure: ExplorerFigure) -> str:
    """What the figure's panels are, read from the axes it drew (under the image, in words)."""
    heat = ", ".join(html.escape(ax.get_title()) for ax in figure.axes)
    return (f"<div class='saber-explorer-caption'>heat maps of the eligible queries per domain ({heat}); "
            f"right: {html.escape(figure.ax_front.get_title())}</div>")


def readout_html(st: PointState) -> str:
    total = sum(st.eligible.values())
    per = ", ".join(f"{d} {n}" for d, n in st.eligible.items())
    feas = ("every domain reaches Q_min" if st.feasible
            else "below Q_min: " + ", ".join(f"{d} ({st.eligible[d]})" for d in st.short))
    return (f"<div class='saber-readout'><b>tau_topic = {st.tau_topic:.3f}, tau_summ = {st.tau_summ:.3f}, "
            f"K = {st.K}, Q_min = {st.Q_min}</b><br>"
            f"eligible queries per domain: {html.escape(per)} (sum {total}; a query may count in several "
            f"domains); {html.escape(feas)}<br>"
            f"candidates per group of a selected query: K = {st.K} topic-only, {st.K} summary-only, {st.K} both "
            f"({3 * st.K} per query); medians available per domain in the table<br>"
            f"<span class='saber-rule'>{html.escape(st.rule_text())}</span></div>")


class ThresholdExplorer:
    """Sliders (tau_topic, tau_summ, K from the sweep's ladder, Q_min), the live figure, the read-out,
    the per-domain table, and a button writing the point as a profile override.

    ``profile``: the run's profile file (the override inherits it; without one the button is off).
    ``last_update_ms``: wall time of the last update (model + figure + table), for the benchmark.
    """

    def __init__(self, model: ExplorerModel, *, tau_topic: float, tau_summ: float, K: int, Q_min: int,
                 profile=None, run_name: str = ""):
        self.model, self.profile, self.run_name = model, Path(profile) if profile else None, run_name
        self.figure = ExplorerFigure(model)
        step = 1 / (len(model.edges) - 1)
        ks = model.k_options()
        self.s_topic = widgets.FloatSlider(value=max(tau_topic, model.floor_topic), min=model.floor_topic, max=1,
                                           step=step, description="tau_topic", readout_format=".2f")
        self.s_summ = widgets.FloatSlider(value=max(tau_summ, model.floor_summ), min=model.floor_summ, max=1,
                                          step=step, description="tau_summ", readout_format=".2f")
        self.s_k = widgets.SelectionSlider(options=ks, value=K if K in ks else ks[0], description="K")
        self.s_q = widgets.IntSlider(value=Q_min, min=1, max=max(500, Q_min), description="Q_min")
        self.zoom = widgets.ToggleButton(value=False, description="zoom", icon="search",
                                         tooltip=f"frame the heat maps on the current point (+-{ZOOM_HALF_WIDTH:g})")
        self.image = widgets.Image(format="jpeg", layout=widgets.Layout(max_width="100%"))
        self.image.add_class("saber-explorer-plot")
        self.caption = widgets.HTML(caption_html(self.figure))
        self.readout = widgets.HTML()
        self.table = widgets.HTML()
        self.name = widgets.Text(value=f"{run_name or 'run'}-thresholds", description="profile name")
        default_dir = str(self.profile.parent) if self.profile else ""
        self.folder = widgets.Text(value=default_dir, description="folder")
        self.button = widgets.Button(description="Save as profile", button_style="primary",
                                     disabled=self.profile is None, icon="save")
        self.save_status = widgets.HTML("" if self.profile else "the run's profile is unknown: cannot write an override")
        self._confirm_overwrite = None
        self.last_update_ms = float("nan")
        self.last_profile: Path | None = None
        for w in (self.s_topic, self.s_summ, self.s_k, self.s_q, self.zoom):
            w.observe(self.update, names="value")
        self.button.on_click(lambda _: self.save_profile())
        self.widget = widgets.VBox([
            widgets.HBox([self.s_topic, self.s_summ]), widgets.HBox([self.s_k, self.s_q, self.zoom]),
            self.image, self.caption, self.readout, self.table,
            widgets.HBox([self.name, self.folder, self.button]), self.save_status])
        self.widget.add_class("saber-threshold-explorer")
        self.update()

    def state(self) -> PointState:
        return self.model.state(self.s_topic.value, self.s_summ.value, self.s_k.value, self.s_q.value)

    def update(self, *_):
        t0 = time.perf_counter()
        st = self.state()
        self.figure.zoom = ZOOM_HALF_WIDTH if self.zoom.value else None
        self.image.value = self.figure.image(st)
        self.readout.value = readout_html(st)
        self.table.value = table_html(st)
        self._confirm_overwrite = None
        self.last_update_ms = (time.perf_counter() - t0) * 1000
        return st

    def save_profile(self) -> Path | None:
        """Write the override (second click on an existing name overwrites it)."""
        if self.profile is None:
            return None
        st = self.state()
        target = (self.name.value, self.folder.value)
        try:
            path = write_threshold_profile(self.profile, self.name.value, tau_topic=st.tau_topic,
                                           tau_summ=st.tau_summ, K=st.K, Q_min=st.Q_min,
                                           out_dir=self.folder.value or None,
                                           overwrite=self._confirm_overwrite == target,
                                           note=f" on run {self.run_name}" if self.run_name else "")
        except FileExistsError as e:
            self._confirm_overwrite = target
            self.save_status.value = f"{html.escape(str(e))}: click again to overwrite it"
            return None
        except (ValueError, OSError) as e:
            self.save_status.value = f"<span style='color:#C44E52'>not written: {html.escape(str(e))}</span>"
            return None
        self._confirm_overwrite = None
        self.last_profile = path
        self.save_status.value = (f"wrote <code class='saber-profile-path'>{html.escape(str(path))}</code>: "
                                  f"<code>saber run select --params {html.escape(str(path))} ...</code>")
        return path
