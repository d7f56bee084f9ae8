"""The one figure writer: every figure is saved as PDF and PNG, with what produced it in each file's
metadata (the run name, the backends behind the numbers, the caption) and the backends in a line at
the bottom of the figure. Both files are reproducible: no creation time, no library version.

Importing this module leaves matplotlib's style alone (the workbench style is :mod:`.plots`), so a
writer outside the pipeline (the leaderboard command) keeps its own look.
"""
from __future__ import annotations

from pathlib import Path


def _bottom_edge(fig, gap_pt: float = 4.0) -> float:
    """Figure-fraction y just below the lowest artist of ``fig`` (never above the figure's bottom edge)."""
    try:
        renderer = fig.canvas.get_renderer()
    except AttributeError:
        renderer = fig._get_renderer()
    bbox = fig.get_tightbbox(renderer)           # inches
    height = fig.get_size_inches()[1]
    return min(0.0, bbox.y0 / height) - gap_pt / 72.0 / height


def save_figure(fig, stem: Path, run_name: str = "", caption: str = "", backends: str = "", *,
                software: str | None = None, titled: bool = True, dpi: float | None = None) -> list[Path]:
    """Save ``fig`` as ``stem.pdf`` and ``stem.png``; returns both paths.

    The description in both files' metadata joins ``run: <run_name>``, ``backends: <backends>`` and
    ``caption`` (the empty ones left out); ``backends`` is also written below the figure.
    ``software``: the producer named in the PNG (``Software``) and the PDF (``Creator``, default
    ``saber_lib``); ``titled``: the file name as each file's title; ``dpi``: the PNG's resolution
    (default: matplotlib's ``savefig.dpi``).
    """
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    note = " | ".join(x for x in (f"run: {run_name}" if run_name else "", f"backends: {backends}" if backends else "",
                                  caption) if x)
    if backends:
        # below everything already drawn (x labels, legends placed under the axes, figure notes):
        # bbox_inches="tight" then grows to include the line, and it never covers an axis label
        fig.text(0.005, _bottom_edge(fig), f"backends: {backends}", fontsize=6, color="#666666", ha="left",
                 va="top", wrap=True)
    title = stem.name if titled else None
    pdf, png = stem.with_suffix(".pdf"), stem.with_suffix(".png")
    fig.savefig(pdf, bbox_inches="tight",
                metadata={"Title": title, "Subject": note, "Creator": software or "saber_lib", "CreationDate": None,
                          "Producer": None})
    fig.savefig(png, dpi=dpi, bbox_inches="tight", metadata={"Title": title, "Description": note, "Software": software})
    return [pdf, png]
