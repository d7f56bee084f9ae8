"""A run as a command outside the stage loop reads it (``saber judge-check``): the profile with the
``--set`` values given, a stage's parameters as the runner would pass them, the data directory, and a
stage's folder brought up to date under those settings (run first when it never finished or is stale;
every file verified). The validation code receives this object, so that it never imports the runner.
"""
from __future__ import annotations

from pathlib import Path

from ..core import data
from . import runner
from .stages import BY_NAME


class RunAccess:
    def __init__(self, profile_path, run_dir: Path, overrides=None, log=print):
        self.profile_path, self.run_dir, self.overrides, self.log = profile_path, Path(run_dir), overrides, log
        self.profile = runner.load_run_profile(profile_path, overrides)
        self._rctx = runner.RunContext(self.profile, self.run_dir)

    def stage_params(self, stage: str) -> dict:
        """The parameters the runner passes to ``stage``'s notebook under this profile."""
        return runner.stage_parameters(self._rctx, BY_NAME[stage])

    def data_dir(self) -> Path:
        return self._rctx.data_dir()

    def stage_dir(self, stage: str) -> Path:
        """The stage's folder as this profile produces it, every file verified (the runner skips what is
        up to date and refuses a stage whose files were edited)."""
        if not (self.run_dir / stage / "manifest.json").is_file():
            self.log(f"[info] {self.run_dir}: stage {stage} has not run; running it")
        runner.run(self.profile_path, [stage], run_dir=self.run_dir, overrides=self.overrides, log=self.log)
        data.require_verified(self.run_dir, stage)
        return self.run_dir / stage
