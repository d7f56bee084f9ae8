"""The thresholds stage's tables and figures (saber_lib.signals.threshold_report) on a hand-made result."""
import matplotlib.pyplot as plt
import numpy as np
import polars as pl
import pytest
from matplotlib.colors import LogNorm

from saber_lib.signals import threshold_report
from saber_lib.signals.thresholds import GridSweep

RES = {"tau_topic": 0.5, "tau_summ": 0.25,
       "per_domain": {"Algebra": {"tau_topic": 0.5, "tau_summ": 0.25, "feasible": True, "extra": {"x": 1}},
                      "Geometry": {"tau_topic": 0.75, "tau_summ": 0.5, "feasible": False, "extra": {}}},
       "frontier": {"Algebra": [{"K": 1, "max_queries": 9, "tau_topic": 0.0, "tau_summ": 0.0},
                                {"K": 2, "max_queries": 4, "tau_topic": 0.5, "tau_summ": 0.0}],
                    "Geometry": [{"K": 1, "max_queries": 3, "tau_topic": 0.0, "tau_summ": 0.5},
                                 {"K": 2, "max_queries": 0, "tau_topic": 0.0, "tau_summ": 0.0}]}}


def test_per_domain_table_drops_nested_entries():
    per = threshold_report.per_domain_table(RES)
    assert per.columns == ["domain", "tau_topic", "tau_summ", "feasible"]
    assert per.rows() == [("Algebra", 0.5, 0.25, True), ("Geometry", 0.75, 0.5, False)]


def test_frontier_long_and_wide():
    front = threshold_report.frontier_long(RES)
    assert front.height == 4 and front.filter(pl.col("domain") == "Geometry")["max_queries"].to_list() == [3, 0]
    wide = threshold_report.frontier_wide(front)
    assert wide.columns == ["K", "Algebra", "Geometry"] and wide.rows() == [(1, 9, 3), (2, 4, 0)]
    fig = threshold_report.frontier_figure(front, ["Algebra", "Geometry"], K=2, Q_min=4)
    ax = fig.axes[0]
    assert [list(line.get_ydata()) for line in ax.lines[:2]] == [[9, 4], [3, 0]]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "symlog"
    plt.close(fig)


def _sweep():
    eligible = np.zeros((2, 2, 3, 3), dtype=np.int64)
    eligible[1, 0] = [[5, 4, 0], [3, 1, 0], [0, 0, 0]]
    eligible[1, 1] = [[2, 2, 0], [1, 0, 0], [0, 0, 0]]
    eligible[0] = 99      # another K: must not show
    zeros = np.zeros((2, 3))
    return GridSweep(["Algebra", "Geometry"], np.array([1, 2]), eligible, zeros, zeros, np.array([5, 2]),
                     np.array([0.0, 0.5, 1.0]))


def test_eligible_grid_log_scale_zero_cells_outline_and_zoom():
    sw = _sweep()
    fig = threshold_report.eligible_grid_figure(sw, ["Algebra", "Geometry"], 2, RES, Q_min=3)
    full, zoom = fig.axes[:2], fig.axes[2:4]
    assert [ax.get_title() for ax in zoom] == ["Algebra (zoom)", "Geometry (zoom)"]
    for d, ax in enumerate(full):
        image = ax.images[0]
        arr = image.get_array()
        assert np.array_equal(arr.data, sw.eligible[1, d].T)
        assert np.array_equal(np.ma.getmaskarray(arr), sw.eligible[1, d].T == 0)   # zero: masked, drawn apart
        norm = image.norm
        assert isinstance(norm, LogNorm) and (norm.vmin, norm.vmax) == (1, 5)   # the largest count at K=2
        assert tuple(image.cmap.get_bad()[:3]) != tuple(image.cmap(0.0)[:3])     # zero is not the colour of 1
        assert [list(line.get_xdata()) for line in ax.lines] == [[0.5]]
    # Algebra at K=2, [topic i][summ j] = [[5, 4, 0], [3, 1, 0], [0, 0, 0]] >= 3: cells (0,0), (0,1), (1,0);
    # its outline has 4 cell edges; Geometry [[2, 2, 0], [1, 0, 0], ...] never reaches 3: none
    assert [len(ax.collections[0].get_segments()) for ax in full] == [4, 0]
    # tau_summ 0.25 reads the grid point 0.5 (the first at or above it): Algebra 1, Geometry 0
    assert [[t.get_text() for t in ax.texts] for ax in full] == [["1"], ["0"]]
    # the zoom keeps at least 8 cells a side: on this 3-point grid (cells 0.5 wide) that is all of [0, 1]
    assert zoom[0].get_xlim() == pytest.approx((0.0, 1.0)) and zoom[0].images[0].norm.vmax == 5
    fig2 = threshold_report.eligible_grid_figure(sw, ["Algebra", "Geometry"], 2, RES, Q_min=3, zoom=0.15)
    plt.close(fig2)
    plt.close(fig)
    fig = threshold_report.eligible_grid_figure(sw, ["Algebra", "Geometry"], 2, {"tau_topic": None, "tau_summ": None})
    assert len(fig.axes) == 3 and all(not ax.lines and not ax.collections for ax in fig.axes[:2])   # + colour bar
    plt.close(fig)


def test_zoom_window_stays_inside_the_grid_and_snaps():
    assert threshold_report.zoom_window(0.95, 0.05, 0.1) == pytest.approx((0.8, 1.0, 0.0, 0.2))
    assert threshold_report.zoom_window(0.5, 0.5, 0.1, lo_topic=0.45) == pytest.approx((0.45, 0.65, 0.4, 0.6))
    assert threshold_report.zoom_window(0.52, 0.33, 0.1, snap=0.05) == pytest.approx((0.4, 0.6, 0.25, 0.45))
    assert threshold_report.grid_index(np.array([0.0, 0.5, 1.0]), 0.25) == 1
    assert threshold_report.grid_index(np.array([0.0, 0.5, 1.0]), 0.5) == 1


def test_the_zoom_is_cut_to_the_cells_with_counts_but_keeps_the_point():
    edges = np.linspace(0, 1, 11)
    counts = np.zeros((2, 11, 11), dtype=int)
    counts[0, 2:5, 0:2] = 3          # topic 0.2-0.4, summ 0-0.1 (domain 0)
    counts[1, 6, 1] = 1              # topic 0.6, summ 0.1 (domain 1)
    box = threshold_report.occupied_box(counts, edges)
    assert box == pytest.approx((0.05, 0.75, -0.15, 0.25))          # one cell of margin around 0.2-0.6, 0-0.1
    assert threshold_report.occupied_box(counts, edges, lo_topic=0.5) == pytest.approx((0.45, 0.75, -0.05, 0.25))
    assert threshold_report.occupied_box(np.zeros((2, 11, 11)), edges) is None
    # around (0.4, 0.1) with half-width 0.3: topic [0.1, 0.7] already inside the box; summ [0, 0.4] cut to 0.25
    assert threshold_report.zoom_window(0.4, 0.1, 0.3, occupied=box) == pytest.approx((0.1, 0.7, 0.0, 0.25))
    # a point outside the box stays in the window; min_width widens a thin window around its middle
    w = threshold_report.zoom_window(0.9, 0.1, 0.3, occupied=box, min_width=0.4)
    assert w[0] <= 0.9 <= w[1] and w[3] - w[2] == pytest.approx(0.4)
