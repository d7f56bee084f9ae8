"""Fault cases of the paper-scale rehearsal (benchmarks/bench_paper_scale.py) stopped from outside:
every process it starts (the per-stage child and the mock LLM server that child starts) ends with it,
and its work folder is removed, on SIGINT, SIGTERM, ``timeout`` and a normal exit.

Old behaviour: SIGTERM left the child running as an orphan (and its mock server) and the
``paper_scale_*`` work folder behind; SIGINT killed the child alone, leaving its mock server
listening; ``timeout`` left the work folder. The rehearsal runs as a real process with its temporary
folders in the test's own folder (TMPDIR), one stage at a tiny scale whose mock server answers slowly
(so the stop lands while it serves); every wait is bounded and whatever a failing case leaves is
killed at the end.
"""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from conftest import needs_data

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks" / "bench_paper_scale.py"
pytestmark = [needs_data("sources"), pytest.mark.pipeline]
# 142 problems, one LLM call each, 0.5 s a call, one at a time: ~70 s of serving (stopped after a few)
SLOW = ["--stages", "summaries", "--scale", "0.0005", "--templates-per-source", "20", "--latency", "0.5",
        "--concurrency", "1"]


def _alive(proc: psutil.Process) -> bool:
    try:   # is_running also checks the process is the one seen (not a new one under a reused pid)
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _start(tmp_path, cmd):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)}
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)


def _serving(proc, tmp_path, timeout=120) -> list[psutil.Process]:
    """Waits until the rehearsal's child has started its mock server; returns the processes below it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        kids = _descendants(proc.pid)
        # the child, the mock server it forked: two generations below the rehearsal
        if any(_descendants(k.pid) for k in kids) and list(tmp_path.glob("paper_scale_*")):
            time.sleep(1.0)                       # a few calls answered: the server is busy
            return _descendants(proc.pid)
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        time.sleep(0.2)
    pytest.fail("the rehearsal's child never started its mock server")


def _left(procs, timeout=30) -> list[int]:
    """The pids of ``procs`` still running after up to ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_alive(p) for p in procs):
        time.sleep(0.2)
    return [p.pid for p in procs if _alive(p)]


def _kill_left(proc, procs):
    """Kills what a failing case left: the processes seen (only while they are the ones seen)."""
    for p in procs:
        if _alive(p):
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
    if proc.poll() is None:
        proc.kill()
    proc.wait(30)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signalled_rehearsal_leaves_no_process_and_no_work_folder(tmp_path, sig):
    proc = _start(tmp_path, [sys.executable, str(BENCH), *SLOW])
    seen: list = []
    try:
        seen = _serving(proc, tmp_path)
        assert len(seen) >= 2
        proc.send_signal(sig)                  # to the rehearsal alone, as `kill` does
        proc.wait(60)
        assert proc.returncode != 0
        assert _left(seen) == [], f"left running after {sig.name}"
        assert list(tmp_path.glob("paper_scale_*")) == []
    finally:
        _kill_left(proc, seen)


def test_a_rehearsal_under_timeout_leaves_no_process_and_no_work_folder(tmp_path):
    # `timeout` sends SIGTERM to the command when its time is up (here once the server is busy)
    proc = _start(tmp_path, ["timeout", "20", sys.executable, str(BENCH), *SLOW])
    seen: list = []
    try:
        seen = _serving(proc, tmp_path)
        proc.wait(60)
        assert proc.returncode == 124          # timeout's own code: the time ran out, not the rehearsal
        assert _left(seen) == [], "left running after timeout"
        assert list(tmp_path.glob("paper_scale_*")) == []
    finally:
        _kill_left(proc, seen)


@pytest.mark.parametrize("gap_s", [0.1, 0.4])
def test_a_second_signal_during_the_clean_up_leaves_no_process_and_no_work_folder(tmp_path, gap_s):
    # `timeout` signals twice: the command, then its whole process group (the rehearsal again). Old:
    # the second SIGTERM raised inside the first one's clean-up (while it waited for the child to
    # stop), so the work folder was never removed: the flaky `paper_scale_*` folder under timeout
    proc = _start(tmp_path, [sys.executable, str(BENCH), *SLOW])
    seen: list = []
    try:
        seen = _serving(proc, tmp_path)
        proc.send_signal(signal.SIGTERM)
        time.sleep(gap_s)                      # the clean-up has begun: the child is being stopped
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        assert proc.returncode != 0
        assert _left(seen) == [], "left running after two signals"
        assert list(tmp_path.glob("paper_scale_*")) == []
    finally:
        _kill_left(proc, seen)


def test_a_finished_rehearsal_leaves_no_process_and_no_work_folder(tmp_path):
    out = tmp_path / "out" / "ps.json"
    out.parent.mkdir()
    proc = _start(tmp_path, [sys.executable, str(BENCH), "--stages", "summaries", "--scale", "0.0005",
                             "--templates-per-source", "20", "--out", str(out)])
    seen: list = []
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            seen += [p for p in _descendants(proc.pid) if p not in seen]
            time.sleep(0.05)
        assert proc.wait(5) == 0, proc.stderr.read().decode()[-2000:]
        assert seen and _left(seen) == []
        assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
        assert out.exists()
    finally:
        _kill_left(proc, seen)
