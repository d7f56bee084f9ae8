"""A run as a command outside the stage loop reads it (``saber judge-check``): the profile with the
``--set`` values given, a stage's parameters as the runner would pass them, the data directory, and a
stage's folder as those settings produce it, every file verified. The validation code receives this
object, so that it never imports the runner.

The run is only read, never written: a stage that is up to date under the settings is read in place;
one that the settings make stale, or that never finished, is computed by the runner in a working
folder of this object (the run's up-to-date stages linked in, read-only to the runner since it skips
them), which :meth:`RunAccess.close` removes. A stage whose files were edited is refused, as the
runner refuses it.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from ..core import data
from . import runner
from . import stages as stage_table
from .stages import BY_NAME


class RunAccess:
    def __init__(self, profile_path, run_dir: Path, overrides=None, log=print):
        self.profile_path, self.run_dir, self.overrides, self.log = profile_path, Path(run_dir), overrides, log
        self.profile = runner.load_run_profile(profile_path, overrides)
        self._rctx = runner.RunContext(self.profile, self.run_dir)
        self._tmp: Path | None = None     # the working folder (made when a stage must be computed)

    def stage_params(self, stage: str) -> dict:
        """The parameters the runner passes to ``stage``'s notebook under this profile."""
        return runner.stage_parameters(self._rctx, BY_NAME[stage])

    def data_dir(self) -> Path:
        return self._rctx.data_dir()

    def stage_dir(self, stage: str) -> Path:
        """The stage's folder as this profile produces it, every file verified: the run's own when it
        is up to date, else the working folder's, where the runner computed it (module docstring)."""
        names = stage_table.upstream_closure([stage], self.profile.values)
        states = self._states(self._rctx, names)
        if states[stage] == "done":
            data.require_verified(self.run_dir, stage)
            return self.run_dir / stage
        for name in names:
            if states[name] == "modified":
                files = runner.changed_files(self._rctx, name, runner.read_manifest(self.run_dir, name))
                raise data.ArtifactModified(data.modified_message(name, files, self.run_dir, self.profile.path))
        work = self._work_dir()
        todo = [n for n in names if states[n] != "done" and not (work / n).exists()]
        if todo:
            self.log(f"[info] {self.run_dir}: {', '.join(f'{n} ({states[n]})' for n in todo)} under these settings: "
                     f"computed in a working folder, {work} (the run is left as it is; the folder is removed at the end)")
        for name in [n for n in names if states[n] == "done"]:
            self._link(self.run_dir / name, work / name)
        for rel in {r for n in names for r in BY_NAME[n].run_inputs}:   # run folders outside any stage
            if (self.run_dir / rel).exists():
                self._link(self.run_dir / rel, work / rel)
        overrides = {**(self.overrides or {}), "run.figures_dir": str(work.parent / "figures")}
        wctx = runner.RunContext(runner.load_run_profile(self.profile_path, overrides), work)
        wstates = self._states(wctx, names)
        shared = [n for n in names if (work / n).is_symlink() and wstates[n] != "done"]
        if shared:   # the runner would rerun it in the linked folder, the run's own: never
            raise data.StageUnfinished(f"stage {shared[0]!r} of {self.run_dir} is up to date in the run but not "
                                       f"in the working folder {work}: nothing computed, the run left as it is")
        runner.run(self.profile_path, [stage], run_dir=work, overrides=overrides, log=self.log)
        data.require_verified(work, stage)
        return work / stage

    def close(self) -> None:
        """Removes the working folder (and what was computed there)."""
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @staticmethod
    def _states(ctx, names) -> dict[str, str]:
        states: dict[str, str] = {}
        for name in names:     # upstream first
            states[name] = runner.stage_state(ctx, BY_NAME[name], states)
        return states

    @staticmethod
    def _link(src: Path, dst: Path) -> None:
        if not dst.exists() and not dst.is_symlink():
            dst.symlink_to(src.resolve(), target_is_directory=src.is_dir())

    def _work_dir(self) -> Path:
        if self._tmp is None:
            self._tmp = Path(tempfile.mkdtemp(prefix="saber-judge-check-"))
        work = self._tmp / self.run_dir.name
        work.mkdir(exist_ok=True)
        return work
