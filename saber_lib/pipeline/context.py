"""Run directories and the per-stage context a notebook works through (:class:`StageContext`).

Layout::

    runs/<name>/<stage>/            the stage's artifacts
    runs/<name>/<stage>/manifest.json   written by the runner (hashes, versions, timings, info)
    runs/<name>/<stage>/info.json   what the notebook recorded with ``ctx.record`` (backends, counts)
    runs/<name>/notebooks/          executed notebooks
    <figures_dir>/<name>/           figures (PDF + PNG) and tables (Markdown + LaTeX)
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..core.stage_params import StageParams
from ..report import figures, plots, tables
from ..core.data import to_jsonable, write_json
from . import stages


class StageNotRun(FileNotFoundError):
    pass


class UndeclaredInput(ValueError):
    """A stage asked for the artifact of a stage it does not declare as an input."""


class StageContext:
    """What a stage notebook uses to find inputs, write artifacts, figures and tables."""

    def __init__(self, run_dir, stage: str, figures_dir: str | os.PathLike = "figures",
                 run_name: str | None = None):
        self.run_dir = Path(run_dir)
        self.stage = stage
        self.dir = self.run_dir / stage
        self.dir.mkdir(parents=True, exist_ok=True)
        self.run_name = run_name or self.run_dir.name
        self.figures = Path(figures_dir) / self.run_name
        self.figures.mkdir(parents=True, exist_ok=True)
        self._info_path = self.dir / "info.json"
        self.info: dict[str, Any] = {}

        plots.use_style()   # before the notebook's first figure, not only at its first save
        if self._info_path.exists():
            # a fresh execution starts a fresh record
            self._info_path.unlink()

    # --- artifacts
    def parameters(self, namespace) -> StageParams:
        """The stage's parameters taken from the notebook's ``namespace`` (``globals()``, where papermill
        injected them): exactly the keys of the stage's sections and the run, checked against the
        schema, for the library functions that take several of them."""
        stage = stages.BY_NAME[self.stage]
        return StageParams.of(stage.sections, namespace, parallel=stage.parallel)

    def path(self, name: str) -> Path:
        p = self.dir / name
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def input(self, stage: str, name: str) -> Path:
        """The artifact ``name`` of stage ``stage``, which must be one of this stage's declared inputs
        (``Stage.declared_inputs`` in :mod:`saber_lib.pipeline.stages`; a notebook outside ``STAGES``
        is not checked), and must exist."""
        own = stages.BY_NAME.get(self.stage)
        if own is not None and stage not in own.declared_inputs():
            raise UndeclaredInput(
                f"stage {self.stage!r} reads {name!r} of stage {stage!r}, which is not one of its declared inputs "
                f"({', '.join(own.declared_inputs()) or 'none'}): declare it in saber_lib/pipeline/stages.py")
        p = self.run_dir / stage / name
        if not p.exists():
            raise StageNotRun(f"{p} is missing: run stage {stage!r} first "
                              f"(saber run {stage} --run-dir {self.run_dir})")
        return p

    def upstream_info(self, stage: str) -> dict:
        """What stage ``stage`` recorded (backends etc.), from its manifest or info file."""
        for name in ("manifest.json", "info.json"):
            p = self.run_dir / stage / name
            if p.exists():
                data = json.loads(p.read_text())
                return data.get("info", data) if name == "manifest.json" else data
        raise StageNotRun(f"stage {stage!r} has no manifest in {self.run_dir}")

    def record(self, **info) -> None:
        """Record facts about this execution (backend, model, counts, timings) for the manifest."""
        self.info.update(to_jsonable(info))
        write_json(self._info_path, self.info)

    # --- figures and tables
    def save_figure(self, fig, name: str, caption: str = "", backends: str = "") -> list[Path]:

        paths = figures.save_figure(fig, self.figures / name, run_name=self.run_name,
                                    caption=caption, backends=backends)
        self.record(figures=sorted(set(self.info.get("figures", [])) | {str(p) for p in paths}))
        return paths

    def save_table(self, df, name: str, caption: str, float_fmt: str = "{:.3f}") -> list[Path]:

        paths = tables.save_table(df, self.figures / name, caption=caption, float_fmt=float_fmt)
        self.record(tables=sorted(set(self.info.get("tables", [])) | {str(p) for p in paths}))
        return paths
