"""Fault cases of a command stopped from outside while it works: ``saber leaderboard`` on Ctrl-C
(SIGINT) and SIGTERM, ``saber run`` on SIGTERM during a stage. Each leaves nothing behind (no hidden
work folder beside ``--out``, no kernel connection file) and says one line, no traceback, with the
shell's status for the signal (130 for Ctrl-C, 143 for SIGTERM).

Old behaviour is given per test. Real processes, stopped once the state to clean up exists; every
wait is bounded.
"""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import needs_data
from saber_lib.core.data import resolve_data_dir

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = resolve_data_dir() / "published"


def _wait_for(cond, proc, timeout=180.0, what="the state to clean up"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = cond()
        if found:
            return found
        if proc.poll() is not None:
            pytest.fail(f"the command ended (status {proc.returncode}) before {what} appeared: "
                        f"{proc.stderr.read()[-2000:]}")
        time.sleep(0.02)
    proc.kill()
    pytest.fail(f"{what} never appeared")


@needs_data("published", "evaluation")
@pytest.mark.parametrize("sig,status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["Ctrl-C", "SIGTERM"])
def test_a_stopped_leaderboard_removes_its_work_folder_and_says_one_line(tmp_path, sig, status):
    # old: SIGTERM left the hidden .lb.XXXX work folder beside --out; Ctrl-C printed a KeyboardInterrupt traceback
    out = tmp_path / "lb"
    proc = subprocess.Popen([sys.executable, "-m", "saber_lib.leaderboard.cli", "--published", str(PUBLISHED),
                             "--n-resamples", "10", "--out", str(out)], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: list(tmp_path.glob(".lb.*")), proc, what="the work folder")
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == status, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert ("interrupted (Ctrl-C)" if sig == signal.SIGINT else "stopped (SIGTERM)") in err
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "left beside --out"


@needs_data("sources")
@pytest.mark.pipeline
def test_saber_run_stopped_during_a_stage_leaves_no_kernel_connection_file(tmp_path):
    # old: SIGTERM during a stage's notebook killed the runner at once; the kernel's connection file
    # (jupyter_client writes it with tempfile.mkstemp: TMPDIR/tmpXXXX.json) stayed behind
    tmp, run = tmp_path / "tmp", tmp_path / "run"
    tmp.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp), "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt")}
    proc = subprocess.Popen([sys.executable, "-m", "saber_lib.pipeline.cli", "run", "corpus", "--params",
                             str(ROOT / "params" / "tiny.yaml"), "--run-dir", str(run),
                             "--set", f"run.figures_dir={tmp_path / 'fig'}"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def connection_files():
        return [p for p in tmp_path.rglob("*.json") if p.is_file() and '"shell_port"' in _text(p)]
    try:
        _wait_for(connection_files, proc, what="the kernel's connection file")
        time.sleep(0.5)                          # the kernel is up and running the notebook
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 143, err
    assert "Traceback" not in err and "stopped (SIGTERM)" in err, err
    assert connection_files() == [], "a kernel connection file was left"
    assert list(tmp.iterdir()) == [], "something was left in the temporary folder"
    assert not (run / "corpus" / "manifest.json").exists()


def _text(p: Path) -> str:
    try:
        return p.read_text(errors="replace")
    except OSError:
        return ""
