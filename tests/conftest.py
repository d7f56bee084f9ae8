import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def project_root() -> Path:
    return ROOT




@pytest.fixture(scope="session")
def tiny_tournament_run(tmp_path_factory):
    """The tiny profile's stages up to the tournament, run once per session through the real command
    line (``saber run tournament``). Returns (run dir, the command's stdout). Tests never change it:
    they work on a copy (:func:`copy_run`)."""
    base = tmp_path_factory.mktemp("tiny-tournament")
    run_dir = base / "run"
    cmd = [sys.executable, "-m", "saber_lib.pipeline.cli", "run", "tournament", "--params",
           str(ROOT / "params" / "tiny.yaml"), "--run-dir", str(run_dir), "--set", f"run.figures_dir={base / 'fig'}"]
    r = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                       timeout=1800)
    assert r.returncode == 0, r.stdout + r.stderr
    return run_dir, r.stdout


def copy_run(src: Path, dst: Path) -> Path:
    """A copy of a run directory with sizes and mtimes kept (so it verifies as unchanged), lock file left out."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".saber.lock"))
    return dst
