import fcntl
import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from saber_lib.core.data import resolve_data_dir

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# Under CI (CI=true, as every CI service sets it) something a test needs that is missing - the reference
# data, the published result files, a module of the project - fails the test: a broken data path or a
# moved module must not turn the suite green by skipping. Outside CI it skips, naming what is missing.
IN_CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
DATA_DIR = resolve_data_dir(None)
PUBLISHED = DATA_DIR / "published"


def missing(what: str):
    """Skip the running test because ``what`` is missing (fail it under ``CI=true``)."""
    if IN_CI:
        pytest.fail(f"missing under CI (CI=true turns this skip into a failure): {what}", pytrace=False)
    pytest.skip(f"missing: {what}")


def needs(present: bool, what: str):
    """Mark a test (or a module, as ``pytestmark``) that needs ``what``: when ``present`` is false it is
    skipped naming it, or fails under ``CI=true`` (checked before its fixtures run)."""
    return pytest.mark.needs(present=bool(present), what=what)


def needs_data(*parts: str):
    """:func:`needs` for a path inside the reference data folder (``SABER_DATA_DIR`` or ``../shared/data``)."""
    path = DATA_DIR.joinpath(*parts)
    return needs(path.exists(), f"{path} (the reference data folder: ../shared/data or SABER_DATA_DIR)")


needs_published = needs((PUBLISHED / "evaluation").is_dir(),
                        f"{PUBLISHED / 'evaluation'} (the authors' published result files in the data folder)")


def _import(name: str, what: str):
    try:
        return importlib.import_module(name)
    except ImportError as e:
        missing(f"{what} ({type(e).__name__}: {e})")


def project_module(name: str):
    """Import one of the project's own modules; an import error skips the test naming it (fails under CI)."""
    return _import(name, f"module {name} of the project")


def extra_module(name: str, extra: str):
    """Import a package of an optional extra that ``make install`` installs for the tests; missing: the
    test is skipped naming the extra (fails under CI)."""
    return _import(name, f"package {name} (pip install -e '.[{extra}]'; make install has it)")


def pytest_configure(config):
    config.addinivalue_line("markers", "needs(present, what): needs something outside the repository "
                                       "(skipped naming it when missing; a failure under CI=true)")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    for mark in item.iter_markers("needs"):
        if not mark.kwargs["present"]:
            missing(mark.kwargs["what"])


@pytest.fixture(scope="session")
def project_root() -> Path:
    return ROOT


def _shared_dir(tmp_path_factory) -> Path:
    """A folder all pytest-xdist workers of this session share (the session's own folder without xdist)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def _built_once(tmp_path_factory, name: str, stages: tuple[str, ...], source: Path | None = None,
                extra: tuple[str, ...] = ()) -> tuple[Path, Path, str]:
    """``saber run STAGES [EXTRA]`` on the tiny profile into ``<shared>/<name>/run`` (on a copy of ``source``
    when given), once per session: under pytest-xdist the first worker that needs it builds it while
    the others wait on a file lock (a failed build is reported by every worker that needs it, without
    building it again). Returns (run dir, figures folder, the command's stdout)."""
    shared = _shared_dir(tmp_path_factory)
    base = shared / name
    run_dir, result = base / "run", shared / f"{name}.json"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)          # released when the file closes (or the worker dies)
        if not result.exists():
            base.mkdir(exist_ok=True)
            if source is not None:
                copy_run(source, run_dir)
            cmd = [sys.executable, "-m", "saber_lib.pipeline.cli", "run", *stages, "--params",
                   str(ROOT / "params" / "tiny.yaml"), "--run-dir", str(run_dir),
                   "--set", f"run.figures_dir={base / 'fig'}", *extra]
            r = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                               text=True, timeout=1800)
            result.write_text(json.dumps({"returncode": r.returncode, "stdout": r.stdout, "stderr": r.stderr}))
    done = json.loads(result.read_text())
    assert done["returncode"] == 0, done["stdout"] + done["stderr"]
    return run_dir, base / "fig" / "run", done["stdout"]


@pytest.fixture(scope="session")
def tiny_tournament_run(tmp_path_factory):
    """The tiny profile's stages up to the tournament, run once per session through the real command
    line (``saber run tournament``). Returns (run dir, the command's stdout). Tests never change it:
    they work on a copy (:func:`copy_run`)."""
    run_dir, _, out = _built_once(tmp_path_factory, "tiny-tournament", ("tournament",))
    return run_dir, out


@pytest.fixture(scope="session")
def tiny_full_run(tmp_path_factory, tiny_tournament_run):
    """The whole tiny pipeline: ``saber run all --jobs 2`` on a copy of :func:`tiny_tournament_run`, so the
    stages after the tournament run here, two at a time, and the copied ones are skipped; once per session
    like it. Returns (run dir, its figures folder, the command's stdout). Tests never change it: they work
    on a copy."""
    return _built_once(tmp_path_factory, "tiny-full", ("all",), source=tiny_tournament_run[0], extra=("--jobs", "2"))


AFTER_TOURNAMENT = ("evaluate", "signal_ablation", "distributions")   # stages that read nothing after the tournament


@pytest.fixture(scope="session")
def tiny_one_job_run(tmp_path_factory, tiny_tournament_run):
    """:data:`AFTER_TOURNAMENT` run again, one at a time: ``saber run evaluate signal_ablation distributions
    --jobs 1`` on a copy of :func:`tiny_tournament_run`, with an embedding cache of its own (every text
    embedded again), once per session like it. The run directory is named ``run`` as the whole run's is
    (the same figures captions). Returns (run dir, its figures folder, the command's stdout); tests never
    change it."""
    base = _shared_dir(tmp_path_factory) / "tiny-one-job"
    return _built_once(tmp_path_factory, "tiny-one-job", AFTER_TOURNAMENT, source=tiny_tournament_run[0],
                       extra=("--jobs", "1", "--set", f"run.cache_dir={base / 'cache'}"))


@pytest.fixture(scope="session")
def published_ranking(tmp_path_factory) -> Path:
    """The published result files the ranking reads (``evaluation/``, ``confidence/``, linked), without the
    cross-system inputs that ``saber leaderboard`` also reads when present (the MTEB snapshot, the
    rephrased-copy summaries: seconds of figures per call): for tests of the ranking alone. The
    cross-system readings are tested on the whole folder (tests/test_leaderboard_crosssystem.py)."""
    out = tmp_path_factory.mktemp("published_ranking")
    for name in ("evaluation", "confidence"):
        (out / name).symlink_to(PUBLISHED / name)
    return out


def status_states(stdout: str) -> dict:
    """``saber status`` output -> stage -> (state, [reason lines]) (a reason line is indented ``    - ``)."""
    out: dict = {}
    last = None
    for ln in stdout.splitlines():
        if ln.startswith("    - "):
            out[last][1].append(ln[6:])
        elif ln.strip():
            last = ln.split()[0]
            out[last] = (ln.split()[1], [])
    return out


def copy_run(src: Path, dst: Path, without: tuple[str, ...] = ()) -> Path:
    """A copy of a run directory with sizes and mtimes kept (so it verifies as unchanged), lock file left out;
    ``without``: stages left out as if they had never run (their folders and their started records)."""
    src = Path(src)
    top, state = set(without), {f"{s}.started.json" for s in without}

    def ignore(folder, names):
        left = top if Path(folder) == src else state if Path(folder) == src / ".saber" else set()
        return [n for n in names if n == ".saber.lock" or n in left]

    shutil.copytree(src, dst, ignore=ignore)
    return dst


def saber_cli(*args, cwd=ROOT, env=None, timeout=900) -> subprocess.CompletedProcess:
    """``saber ARGS`` as a user runs it: the command line in a real process, this checkout's code
    (``env`` adds variables)."""
    return subprocess.run([sys.executable, "-m", "saber_lib.pipeline.cli", *map(str, args)], cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}, capture_output=True, text=True,
                          timeout=timeout)


def one_line_error(r: subprocess.CompletedProcess, *parts, code=None) -> str:
    """The one line a failed command printed (no traceback), holding every one of ``parts``."""
    assert r.returncode != 0 and (code is None or r.returncode == code), (r.returncode, r.stdout + r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    for part in parts:
        assert str(part) in lines[0], (part, lines[0])
    return lines[0]
