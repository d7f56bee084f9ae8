"""The thresholds stage's tables and figures (saber_lib.signals.threshold_report) on a hand-made result."""
import matplotlib.pyplot as plt
import numpy as np
import polars as pl

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


def test_eligible_grid_shares_one_scale_and_marks_the_choice():
    sw = _sweep()
    fig = threshold_report.eligible_grid_figure(sw, ["Algebra", "Geometry"], 2, RES)
    panels = fig.axes[:2]
    for d, ax in enumerate(panels):
        image = ax.images[0]
        assert np.array_equal(image.get_array(), sw.eligible[1, d].T)
        assert image.get_clim() == (0, 5)       # the largest count over both domains at K=2
        assert [list(line.get_xdata()) for line in ax.lines] == [[0.5]]
    plt.close(fig)
    fig = threshold_report.eligible_grid_figure(sw, ["Algebra", "Geometry"], 2, {"tau_topic": None, "tau_summ": None})
    assert all(not ax.lines for ax in fig.axes[:2])
    plt.close(fig)
