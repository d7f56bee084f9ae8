"""One figure style for the whole workbench: fonts, one colour per candidate group and per domain.

Every figure is saved as PDF and PNG with the run name and the backends in its metadata, and the
backends in a caption line at the bottom of the figure.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg") if not matplotlib.get_backend().lower().startswith(("module://", "nbagg", "ipympl")) else None
import matplotlib.pyplot as plt  # noqa: E402

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
    """Apply the workbench's matplotlib style (call once per notebook; save_figure calls it too)."""
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


def _bottom_edge(fig, gap_pt: float = 4.0) -> float:
    """Figure-fraction y just below the lowest artist of ``fig`` (never above the figure's bottom edge)."""
    try:
        renderer = fig.canvas.get_renderer()
    except AttributeError:
        renderer = fig._get_renderer()
    bbox = fig.get_tightbbox(renderer)           # inches
    height = fig.get_size_inches()[1]
    return min(0.0, bbox.y0 / height) - gap_pt / 72.0 / height


def save_figure(fig, stem: Path, run_name: str, caption: str = "", backends: str = "") -> list[Path]:
    """Save ``fig`` as ``stem.pdf`` and ``stem.png``; metadata carries run name and backends."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    note = " | ".join(x for x in (f"run: {run_name}", f"backends: {backends}" if backends else "", caption) if x)
    if backends:
        # below everything already drawn (x labels, legends placed under the axes, figure notes):
        # bbox_inches="tight" then grows to include the line, and it never covers an axis label
        fig.text(0.005, _bottom_edge(fig), f"backends: {backends}", fontsize=6, color="#666666", ha="left",
                 va="top", wrap=True)
    pdf, png = stem.with_suffix(".pdf"), stem.with_suffix(".png")
    fig.savefig(pdf, bbox_inches="tight",
                metadata={"Title": stem.name, "Subject": note, "Creator": "saber_lib", "CreationDate": None,
                          "Producer": None})
    fig.savefig(png, bbox_inches="tight", metadata={"Title": stem.name, "Description": note, "Software": None})
    return [pdf, png]


use_style()
