"""Run integrity: the run-directory lock, the files a stage wrote (recorded in its manifest and
verified before anything reads them), the failure budget of LLM stages, and what happens to the
artifacts of a stage whose setting changed.

* :class:`RunLock`: an OS file lock (``fcntl.flock``) on ``<run dir>/.saber.lock`` held for a whole
  ``saber run``; the kernel releases it when the process ends, however it ends. A second run on the
  same directory fails at once, naming the holder's pid and command line.
* :func:`output_records` / :func:`changed_outputs`: per output file its size, ``mtime_ns`` and
  sha256; a file whose size and mtime are unchanged is taken as unchanged, otherwise it is hashed
  (every file is hashed with ``full``: ``--verify``, an old manifest, :func:`require_verified`,
  which commands outside ``saber run`` call before they read a stage). A temporary file of a write
  that never finished (``saber_lib.core.data.is_temp_file``) is never an output: it is reported as
  half-written (:func:`half_written`) and removed before the stage executes again.
* :func:`check_llm_budget`: the LLM accounting a notebook recorded (``ctx.record(llm=backend.describe())``
  or ``llm_usage=backend.usage()``) against ``llm.max_failure_rate`` (``saber_lib.llm.budget``).
* :func:`clear_other_setting`: before a stage executes, artifacts left by an execution with other
  parameters or inputs are moved to ``<run dir>/_superseded/<stage>-<time>/`` (stages that resume
  from their own folder) or removed (the others), so that an artifact never mixes two settings.
* :func:`claim_figures` / :func:`remove_stage_figures`: the figures folder belongs to one run
  directory, and a stage's figures and tables of its last execution go before it executes again.
* :func:`figure_records` / :func:`changed_figures` / :func:`missing_figures`: the figures and tables
  a stage wrote are recorded outputs too (the manifest's ``figure_outputs``): an edited one makes
  the stage modified, a missing one makes it stale (a run draws it again).
"""
from __future__ import annotations

import fcntl  # POSIX only: the workbench runs on Linux and macOS
import getpass
import json
import math
import os
import shlex
import shutil
import sys
import time
from datetime import datetime
from pathlib import Path

from ..core.data import temp_files, write_json
# a stage's recorded outputs and their check live with the files (layer 0), so that every command
# that reads a stage (the leaderboard's too) verifies through them
from ..core.data import HALF_WRITTEN, changed_outputs, hash_file, output_hash_of, output_records, timing_files
from ..llm.budget import check_failure_budget
from ..llm.redact import redact_text

LOCK_FILE = ".saber.lock"
STATE_DIR = ".saber"          # <run dir>/.saber/<stage>.started.json: the setting of the last start
SUPERSEDED_DIR = "_superseded"


# ----------------------------------------------------------------------------- the lock
class RunLocked(RuntimeError):
    """Another process holds the run directory's lock."""


def _command_line() -> str:
    argv = list(sys.argv)
    if argv and argv[0].endswith(("cli.py", "__main__.py")):
        argv[0] = "saber"
    return shlex.join([Path(argv[0]).name, *argv[1:]] if argv else ["?"])


class RunLock:
    """``with RunLock(run_dir):`` holds an exclusive ``flock`` on ``run_dir/.saber.lock``."""

    def __init__(self, run_dir):
        self.path = Path(run_dir) / LOCK_FILE
        self.fd: int | None = None

    def acquire(self) -> "RunLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = json.loads(os.pread(fd, 1 << 16, 0).decode() or "{}")
            except (ValueError, UnicodeDecodeError):
                holder = {}
            os.close(fd)
            command = redact_text(str(holder.get("command", "command unknown")))  # written by any version
            raise RunLocked(
                f"{self.path.parent} is in use by another saber run (pid {holder.get('pid', '?')}: "
                f"{command}, since {holder.get('started', '?')}); "
                "wait for it to end, stop it, or use another --run-dir") from None
        os.ftruncate(fd, 0)
        # the command line may carry a URL password (--set llm.base_urls=...): masked, the file stays
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "command": redact_text(_command_line()),
                                  "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}).encode(), 0)
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor drops the flock
            self.fd = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()


# ----------------------------------------------------------------------------- recorded outputs
def remove_half_written(stage_dir: Path, log=print) -> list[Path]:
    """Remove the temporary files of unfinished writes before a stage executes (the run lock is
    held: no process is writing them any more), naming each in the log."""
    gone = temp_files(stage_dir)
    for p in gone:
        p.unlink(missing_ok=True)
        log(f"removed {p}: {HALF_WRITTEN} (left by an earlier run)")
    return gone


def manifest_age_h(manifest: dict) -> float:
    """Hours since the manifest's outputs were recorded (``finished_at``, or the last ``accepted``
    edit); infinite when neither can be read (an unknown age gets the full check)."""
    stamps = [manifest.get("finished_at")] + [a.get("at") for a in manifest.get("accepted") or []]
    times = []
    for s in stamps:
        try:
            times.append(datetime.strptime(s, "%Y-%m-%dT%H:%M:%S%z").timestamp())
        except (TypeError, ValueError):
            continue
    return (time.time() - max(times)) / 3600 if times else math.inf


def accept(run_dir: Path, stage: str, log=print) -> dict:
    """Record the stage folder's current files as the stage's outputs (an edit made on purpose):
    the manifest keeps its parameters and inputs, gets the new output records and hash and an
    ``accepted`` entry (who, when, which files); the stages that read it become stale. Temporary
    files of writes that never finished are removed (they are never outputs)."""
    run_dir = Path(run_dir)
    path = run_dir / stage / "manifest.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: stage {stage!r} never finished in {run_dir}; "
                                "there is nothing to accept")
    man = json.loads(path.read_text())
    files = changed_outputs(run_dir / stage, man)
    remove_half_written(run_dir / stage, log)
    recs = output_records(run_dir / stage)
    man["outputs"], man["output_hash"] = recs, output_hash_of(recs)
    man["timing_files"] = timing_files(run_dir / stage)
    if FIGURE_OUTPUTS in man:  # its figures and tables as they are now (an accepted edit of a table)
        files += changed_figures(man, full=True)
        man[FIGURE_OUTPUTS] = figure_records(Path(man.get("figures") or "."), man.get("info"))
    man.setdefault("accepted", []).append({"by": getpass.getuser(), "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                           "files": files})
    write_json(path, man)
    log(f"{stage}: accepted {len(files)} changed file(s) as its outputs; the stages reading it are now stale")
    return man


# ----------------------------------------------------------------------------- failure budget
def _usages(obj, out: list) -> list:
    """Every LLM accounting a notebook recorded: dicts holding ``llm_usage`` (``Backend.describe``
    or a scorer's ``describe``), with their ``llm_first_errors`` when present."""
    if isinstance(obj, dict):
        u = obj.get("llm_usage")
        if isinstance(u, dict) and "failed" in u:
            out.append((u, list(obj.get("llm_first_errors") or [])))
        for k, v in obj.items():
            if k != "llm_usage":
                _usages(v, out)
    elif isinstance(obj, list):
        for v in obj:
            _usages(v, out)
    return out


def check_llm_budget(info: dict, max_rate: float, stage: str) -> None:
    """Raise ``FailureBudgetExceeded`` when the LLM requests the stage recorded fail past
    ``max_rate`` (see :mod:`saber_lib.llm.budget`); a stage that recorded no LLM use passes."""
    n_calls = n_failed = 0
    reasons: list[str] = []
    for u, errs in _usages(info, []):
        n_calls += int(u.get("calls", 0)) + int(u.get("cached", 0)) + int(u["failed"])
        n_failed += int(u["failed"])
        reasons += errs
    check_failure_budget(n_calls, n_failed, reasons, max_rate=max_rate, stage=stage)


# ----------------------------------------------------------------------------- changed settings
def started_path(run_dir: Path, stage: str) -> Path:
    return Path(run_dir) / STATE_DIR / f"{stage}.started.json"


def record_start(run_dir: Path, stage: str, setting: dict) -> None:
    write_json(started_path(run_dir, stage), setting)


def clear_other_setting(run_dir: Path, stage: str, setting: dict, manifest: dict | None, resumable: bool,
                        log=print) -> Path | None:
    """Before ``stage`` executes under ``setting`` (``param_hash`` + ``input_hashes``): when its folder
    holds artifacts of another setting (per its manifest, else the record of its last start), move
    them to ``_superseded/<stage>-<time>/`` (``resumable`` stages, whose notebooks resume from their
    own folder) or remove them. Same setting, or nothing known: the folder is kept (a killed run
    resumes). Returns where the old artifacts went (None when kept or removed)."""
    run_dir = Path(run_dir)
    stage_dir = run_dir / stage
    if not stage_dir.exists() or not any(stage_dir.iterdir()):
        return None
    prev = None
    if manifest is not None:
        prev = {"param_hash": manifest.get("param_hash"), "input_hashes": manifest.get("input_hashes")}
    elif started_path(run_dir, stage).exists():
        prev = json.loads(started_path(run_dir, stage).read_text())
    if prev is None or prev == setting:
        return None
    if not resumable:
        shutil.rmtree(stage_dir)
        return None
    dest = run_dir / SUPERSEDED_DIR / f"{stage}-{time.strftime('%Y%m%dT%H%M%S')}"
    n = 1
    while dest.exists():
        n += 1
        dest = dest.with_name(f"{stage}-{time.strftime('%Y%m%dT%H%M%S')}-{n}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(stage_dir), str(dest))
    log(f"[info] {stage}: its artifacts belong to another setting; moved to {dest}")
    return dest


# ----------------------------------------------------------------------------- the figures folder
FIGURES_OWNER = ".saber-run.json"   # <figures_dir>/<run name>/.saber-run.json: the run it belongs to


class FiguresFolderTaken(RuntimeError):
    """The figures folder of a run's name belongs to another run directory."""


def claim_figures(figures: Path, run_dir: Path, log=print) -> Path:
    """Make ``figures`` (``<figures_dir>/<run name>``) the figures folder of ``run_dir``, under that
    run's lock. A folder recorded as another run directory's (that still exists) is refused, since
    two runs would mix and delete each other's tables; the record of a run directory that is gone
    (moved or deleted) is taken over, with a line in the log."""
    figures, run_dir = Path(figures), Path(run_dir).resolve()
    owner = figures / FIGURES_OWNER
    try:
        prev = json.loads(owner.read_text()).get("run_dir")
    except (OSError, ValueError, AttributeError):
        prev = None
    if prev and Path(prev) != run_dir:
        if Path(prev).is_dir():
            raise FiguresFolderTaken(
                f"figures folder {figures} belongs to run {prev}; run {run_dir} has the same name "
                f"({run_dir.name!r}): give it another run directory name or another run.figures_dir")
        log(f"[info] figures folder {figures}: its run {prev} is gone; it now belongs to {run_dir}")
    if prev != str(run_dir):
        write_json(owner, {"run_dir": str(run_dir)})
    return figures


def figure_files(figures: Path, *records: dict | None) -> list[Path]:
    """The figure and table files that records of a stage (its manifest's ``info`` or its
    ``info.json``) list inside ``figures`` (a copied run's records naming another folder are ignored)."""
    figures = Path(figures).resolve()
    out = []
    for rec in records:
        for key in ("figures", "tables"):
            for f in (rec or {}).get(key) or []:
                p = Path(f)
                if p.parent.resolve() == figures and p not in out:
                    out.append(p)
    return out


def remove_stage_figures(figures: Path, stage_dir: Path, manifest: dict | None) -> list[Path]:
    """Before a stage executes: remove the figures and tables its last execution wrote (per its
    manifest, or the ``info.json`` of an execution that did not finish), so that what a rerun does
    not write again does not linger beside what it writes."""
    info_path = Path(stage_dir) / "info.json"
    try:
        partial = json.loads(info_path.read_text()) if info_path.exists() else None
    except ValueError:
        partial = None
    files = figure_files(figures, (manifest or {}).get("info"), partial)
    for p in files:
        p.unlink(missing_ok=True)
    return files


# ----------------------------------------------------------------------------- figures and tables as outputs
FIGURE_OUTPUTS = "figure_outputs"   # manifest field: {absolute path: {size, mtime_ns, sha256}}


def figure_records(figures: Path, info: dict | None) -> dict[str, dict]:
    """The figure and table files a stage's ``info`` lists in ``figures``, each with its size,
    ``mtime_ns`` and sha256 (the manifest's ``figure_outputs``)."""
    out = {}
    for p in figure_files(figures, info):
        if p.is_file():
            st = p.stat()
            out[str(p)] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": hash_file(p)}
    return out


def changed_figures(manifest: dict, full: bool = False) -> list[str]:
    """The recorded figures and tables of a stage that exist but differ from their records (size
    and mtime first, hashed when one differs or always with ``full``)."""
    changed = []
    for path, r in (manifest.get(FIGURE_OUTPUTS) or {}).items():
        p = Path(path)
        try:
            st = p.stat()
        except FileNotFoundError:
            continue  # missing: missing_figures
        if st.st_size == r["size"] and st.st_mtime_ns == r["mtime_ns"] and not full:
            continue
        if st.st_size != r["size"] or hash_file(p) != r["sha256"]:
            changed.append(f"{p} (table or figure)")
    return changed


def missing_figures(manifest: dict) -> list[str]:
    """The recorded figures and tables of a stage that are gone (the stage is not done: it reruns)."""
    return [f"{path} (table or figure) is missing" for path in manifest.get(FIGURE_OUTPUTS) or {}
            if not Path(path).is_file()]
