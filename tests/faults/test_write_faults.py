"""Fault cases of what the runner writes: a URL password must reach no file of a run (nor the "in
use" error of a second run), and a disk that fills while a manifest is written must leave no
temporary file and say so in one line.

Real processes through the command line, on copies of the session's tiny run (conftest).
"""
import base64
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import copy_run
from saber_lib.pipeline import integrity
from test_run_faults import HOLDER   # a process holding a run directory's lock (tests/faults)

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "params" / "tiny.yaml")
PASSWORD = "pw-planted-secret-5150"
TOKEN = "tok-planted-secret-6060"


def saber(*args, prelude="", timeout=900):
    code = prelude + "\nimport sys\nfrom saber_lib.pipeline.cli import main\nraise SystemExit(main(sys.argv[1:]))\n"
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def run(tiny_tournament_run, tmp_path):
    return copy_run(tiny_tournament_run[0], tmp_path / "run")


def _secrets() -> list[bytes]:
    return [s.encode() for s in (PASSWORD, TOKEN, base64.b64encode(f"alice:{PASSWORD}".encode()).decode())]


def _files_holding_a_secret(*folders) -> list[str]:
    hits = []
    for folder in folders:
        for p in sorted(Path(folder).rglob("*")):
            if p.is_file() and any(s in p.read_bytes() for s in _secrets()):
                hits.append(str(p))
    return hits


# --------------------------------------------------------------------------- secrets
@pytest.mark.pipeline   # on a copy of the session's tiny run (built by the command line)
def test_a_planted_url_password_reaches_no_file_the_runner_writes(run, tmp_path):
    # old: the command line, password included, stayed in <run>/.saber.lock (0644) after the run
    fig = tmp_path / "fig"
    url = f"http://alice:{PASSWORD}@127.0.0.1:9/v1?api_key={TOKEN}"
    # old: a --set item that is not valid YAML was quoted whole, password included, in the error
    r = saber("run", "topics", "--params", TINY, "--run-dir", run, "--set", f"llm.base_urls=[{url}]")
    assert r.returncode == 2 and "not valid YAML" in r.stderr and "http://***@127.0.0.1:9" in r.stderr
    assert not any(s.decode() in r.stderr for s in _secrets())
    r = saber("run", "topics", "--params", TINY, "--run-dir", run, "--set", f"run.figures_dir={fig}",
              "--set", f'llm.base_urls=["{url}"]')
    assert r.returncode == 0, r.stderr
    assert "[run ] topics" in r.stdout                        # the llm section is one of its parameters
    assert not any(s.decode() in r.stdout + r.stderr for s in _secrets())
    assert (run / "notebooks" / "02_topics.ipynb").exists() and any(fig.rglob("*"))
    assert _files_holding_a_secret(run, fig) == []
    assert "***@127.0.0.1:9" in (run / integrity.LOCK_FILE).read_text()


def test_the_in_use_error_and_the_lock_file_mask_the_holders_password(tmp_path):
    # old: "... in use by another saber run (pid N: -c RUN --set llm.base_urls=[http://alice:pw@...]"
    d = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(d), "--set",
                               f"llm.base_urls=[http://alice:{PASSWORD}@h:1/v1?api_key={TOKEN}]"],
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        lock = (d / integrity.LOCK_FILE).read_text()
        r = saber("run", "corpus", "--params", TINY, "--run-dir", d)
    finally:
        holder.kill()
        holder.wait()
    assert r.returncode == 1 and "in use by another saber run" in r.stderr and f"pid {holder.pid}" in r.stderr
    assert "http://***@h:1/v1?api_key=***" in r.stderr and "http://***@h:1/v1" in lock
    assert not any(s.decode() in r.stderr + lock for s in _secrets())


# --------------------------------------------------------------------------- a full disk
DISK_FULL = """
import errno, pathlib
_real = pathlib.Path.write_text
def _full(self, data, *a, **k):
    if self.name.startswith("manifest.json.tmp"):
        _real(self, data[: len(data) // 2], *a, **k)
        raise OSError(errno.ENOSPC, "No space left on device")
    return _real(self, data, *a, **k)
pathlib.Path.write_text = _full
"""


@pytest.mark.pipeline   # on a copy of the session's tiny run (built by the command line)
def test_a_disk_that_fills_during_the_manifest_write_leaves_nothing_behind(run, tmp_path):
    # old: a traceback, and select/manifest.json.tmpPID, which the next run recorded as an output
    args = ("run", "select", "--force", "--params", TINY, "--run-dir", run, "--set",
            f"run.figures_dir={tmp_path / 'fig'}")
    r = saber(*args, prelude=DISK_FULL)
    assert r.returncode == 1, r.stdout + r.stderr
    # the notebook kernel may log its own shutdown ("[IPKernelApp] ...") on the same stderr
    said = [line for line in r.stderr.strip().splitlines() if not line.startswith("[IPKernelApp]")]
    assert "Traceback" not in r.stderr and len(said) == 1, r.stderr
    assert "no space left on device" in r.stderr and str(run / "select" / "manifest.json") in r.stderr
    assert not [p for p in run.rglob("*") if ".tmp" in p.name]
    assert not (run / "select" / "manifest.json").exists()   # not done: it reruns
    t0 = time.monotonic()
    r = saber(*args[:2], *args[3:])                         # the disk has room again
    assert r.returncode == 0 and "[run ] select (missing)" in r.stdout, r.stdout + r.stderr
    outputs = json.loads((run / "select" / "manifest.json").read_text())["outputs"]
    assert outputs and not [k for k in outputs if "tmp" in k], (outputs, time.monotonic() - t0)
