"""The threshold explorer's figure and widget (``05_thresholds``); the numbers come from
:class:`saber_lib.signals.explorer.ExplorerModel`.

The figure: per domain the eligible-queries grid of the current K (``imshow``) with the feasible
region's boundary (cell edges where ``E_d >= Q_min`` changes) and a crosshair at the current thresholds; on the right
the feasible frontier (most eligible queries per domain against K) with the current point of each
domain. The axes are drawn once, the heat maps once per K, the boundaries per (K, Q_min); a slider move restores that and draws only the
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
from matplotlib.colors import SymLogNorm
from matplotlib.figure import Figure
from PIL import Image

from ..report.plots import DOMAIN_COLORS
from .explorer import ExplorerModel, PointState, write_threshold_profile
from .thresholds import frontier


class ExplorerFigure:
    """Heat maps + frontier; :meth:`image` renders the current point (fast path after the first call)."""

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
        self.vmax = max(1, int(sw.eligible.max()))
        e = model.edges
        self.lo_t, self.lo_s = model.floor_topic, model.floor_summ
        self._static_key = None
        self._background = None
        self._images, self._layers = [], {}
        for d, ax in enumerate(self.axes):
            half = 0.5 / (len(e) - 1)                 # cell (i, j) centred on (tau_i, tau_j)
            im = ax.imshow(np.zeros((len(e), len(e))), origin="lower", extent=(-half, 1 + half, -half, 1 + half), aspect="auto",
                           cmap="magma", norm=SymLogNorm(linthresh=1, vmin=0, vmax=self.vmax), interpolation="nearest",
                           animated=True)
            self._images.append(im)
            ax.grid(False)
            ax.set_xlim(self.lo_t, 1)
            ax.set_ylim(self.lo_s, 1)
            ax.set_xlabel("tau_topic", fontsize=8)
            ax.tick_params(labelsize=7)
            if d == 0:
                ax.set_ylabel("tau_summ", fontsize=8)
        self._bounds = [ax.add_collection(LineCollection([], colors="w", linewidths=0.9, animated=True))
                        for ax in self.axes]
        # animated artists: drawn on top of the cached background at every update
        self.vlines = [ax.axvline(0.5, color="c", lw=1, animated=True) for ax in self.axes]
        self.hlines = [ax.axhline(0.5, color="c", lw=1, animated=True) for ax in self.axes]
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
        self.fig.suptitle("eligible queries per domain at the current K (log colour; white outline: E >= Q_min); "
                          "cyan crosshair: the current thresholds", fontsize=9)
        # the base (axes, ticks, labels) is drawn once; K / Q_min changes draw the images on it
        self.canvas.draw()
        self._base = self.canvas.copy_from_bbox(self.fig.bbox)
        for K in model.k_options():          # every K's heat maps up front: a K move then only draws lines
            self._image_layer(K)

    def _image_layer(self, K: int):
        """The base with the heat maps of ``K`` drawn on it (cached per K)."""
        if K not in self._layers:
            m = self.model
            k = m.sweep.k_index(K) if K in m.k_options() else None
            self.canvas.restore_region(self._base)
            for d, (ax, im) in enumerate(zip(self.axes, self._images)):
                im.set_data(m.sweep.eligible[k, d].T if k is not None else np.zeros_like(im.get_array()))
                ax.draw_artist(im)
            self._layers[K] = self.canvas.copy_from_bbox(self.fig.bbox)
        return self._layers[K]

    def _draw_static(self, K: int, Q_min: int):
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
        self._static_key = (K, Q_min)

    def image(self, st: PointState) -> bytes:
        """The figure at ``st`` as JPEG bytes."""
        if self._static_key != (st.K, st.Q_min):
            self._draw_static(st.K, st.Q_min)
        self.canvas.restore_region(self._background)
        for d, (ax, name) in enumerate(zip(self.axes, self.model.domains)):
            self.vlines[d].set_xdata([st.tau_topic, st.tau_topic])
            self.hlines[d].set_ydata([st.tau_summ, st.tau_summ])
            for a in (self.vlines[d], self.hlines[d]):
                ax.draw_artist(a)
        for name, p in self.points.items():
            p.set_data([st.K], [st.eligible[name]])
            self.ax_front.draw_artist(p)
        buf = io.BytesIO()
        Image.frombuffer("RGBA", self.canvas.get_width_height(), self.canvas.buffer_rgba(), "raw", "RGBA", 0, 1
                         ).convert("RGB").save(buf, format="JPEG", quality=90)   # 10x faster than PNG here
        return buf.getvalue()


def feasible_boundary(mask: np.ndarray, edges: np.ndarray) -> list:
    """Segments between grid cells where ``mask[i, j]`` (tau_topic i, tau_summ j) changes: the outline
    of the feasible region, on the cells the heat map draws (centred on the grid points)."""
    h = (edges[1] - edges[0]) / 2
    segs = []
    di = np.argwhere(mask[1:, :] != mask[:-1, :])      # between (i, j) and (i+1, j): a vertical edge
    segs += [[(edges[i] + h, edges[j] - h), (edges[i] + h, edges[j] + h)] for i, j in di]
    dj = np.argwhere(mask[:, 1:] != mask[:, :-1])      # between (i, j) and (i, j+1): a horizontal edge
    segs += [[(edges[i] - h, edges[j] + h), (edges[i] + h, edges[j] + h)] for i, j in dj]
    return segs


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
        for w in (self.s_topic, self.s_summ, self.s_k, self.s_q):
            w.observe(self.update, names="value")
        self.button.on_click(lambda _: self.save_profile())
        self.widget = widgets.VBox([
            widgets.HBox([self.s_topic, self.s_summ]), widgets.HBox([self.s_k, self.s_q]),
            self.image, self.caption, self.readout, self.table,
            widgets.HBox([self.name, self.folder, self.button]), self.save_status])
        self.widget.add_class("saber-threshold-explorer")
        self.update()

    def state(self) -> PointState:
        return self.model.state(self.s_topic.value, self.s_summ.value, self.s_k.value, self.s_q.value)

    def update(self, *_):
        t0 = time.perf_counter()
        st = self.state()
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
