"""``saber leaderboard --stability``: query-set stability of the published systems' order
(:mod:`saber_lib.evaluate.stability` over the kernels of :mod:`saber_lib.metrics.stability`).

For every setting in which every published system has per-query nDCG@10 (the evaluation files;
workbench runs are left out: they may score other queries), on the queries every one of them
scored: ``stability.parquet`` (split-half tau and swap rate for n up to half the queries, the
discriminative power for n up to all of them), ``stability_swaps.parquet`` (the swap rate binned
by the difference of means), ``stability_needed.parquet`` (the query count for the target tau,
extrapolated by the fitted curve where the queries do not reach it), ``stability.md`` and the
figure ``stability_<setting>`` (PNG and PDF).
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
import polars as pl

from ..evaluate import stability as est
from ..report.figures import save_figure
from ..report.tables import to_markdown
from .published import TASKS, System
from .report import FIGURE_STYLE, MARKDOWN_STYLE

#: the published files' defaults: 4,000 splits and 200 query subsets per query count
SPLITS, SUBSETS, PERMUTATIONS, TARGET = 4000, 200, 4000, 0.9


def published_matrices(systems: Sequence[System]) -> dict[str, np.ndarray]:
    """Systems x queries nDCG of each setting every system has (settings in :data:`TASKS` order)."""
    out = {}
    for task in TASKS:
        if systems and all(task in s.scores for s in systems):
            out[task] = np.vstack([np.asarray(s.scores[task], dtype=np.float64) for s in systems])
    return out


def write_published_stability(out: Path, systems: Sequence[System], *, n_splits: int, n_subsets: int, n_permutations: int,
                    alpha: float, target: float, seed: int, caption: str, progress: bool = False
                    ) -> tuple[list[Path], dict]:
    """The files of the module docstring into ``out``; returns them and the facts for the manifest
    (per setting, the query counts needed for the target)."""
    mats = published_matrices(systems)
    frame, swaps, needed = est.stability_frames(mats, n_splits=n_splits, n_subsets=n_subsets,
                                                n_permutations=n_permutations, alpha=alpha, target=target, seed=seed,
                                                limit_half=False, progress=progress)
    meta = {"caption": caption}
    files = []
    for name, df in (("stability", frame), ("stability_swaps", swaps), ("stability_needed", needed)):
        df.write_parquet(out / f"{name}.parquet", metadata=meta)
        files.append(out / f"{name}.parquet")
    how = (f"{len(systems)} published systems with per-query files ({', '.join(s.name for s in systems)}); "
           f"split-half Kendall tau-b over {n_splits} seeded splits into two disjoint sets of n queries; discriminative "
           f"power: share of system pairs with p < {alpha:g} (paired sign-flip and shifted bootstrap tests, "
           f"{n_permutations} draws, Holm over the pairs), mean over {n_subsets} random subsets of n queries; seed {seed}")
    lines = "; ".join(f"{t}: {est.needed_phrase(needed, t)}" for t in mats)
    cap = f"Query-set stability of the published systems' order by nDCG@10 ({how}). {lines}. {caption}"
    (out / "stability.md").write_text(to_markdown(frame.drop("n_subsets"), cap, **MARKDOWN_STYLE))
    files.append(out / "stability.md")
    for task in mats:
        fig = est.stability_figure(frame, task, alpha, title=f"Published systems, {task}")
        files += save_figure(fig, out / f"stability_{task}", caption=cap, **FIGURE_STYLE)
        plt.close(fig)
    facts = {"stability_needed": {t: [r for r in needed.filter(pl.col("setting") == t).iter_rows(named=True)]
                                  for t in mats}}
    return files, facts
