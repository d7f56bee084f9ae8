"""Fault cases of what a run records and where it goes: the evaluate stage's timing table
(``latency.parquet``, kept out of the output hash as run-to-run noise) deleted or damaged after the
stage finished, and a ``--run-dir`` that is a regular file (or lies under one).

Old behaviour is given per test. The command line runs as a real process on copies of the tiny run.
"""
import shutil
from pathlib import Path

import polars as pl
import pytest

from conftest import copy_run, needs_data, one_line_error as _one_line, saber_cli as saber, status_states

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "params" / "tiny.yaml"
pytestmark = pytest.mark.pipeline        # the command line in real processes


# --------------------------------------------------------------------------- the timing table
@pytest.fixture(scope="module")
def evaluated(tmp_path_factory, tiny_full_run):
    """A copy of the session's whole tiny run (its evaluate stage ran through ``saber run all``)."""
    tmp = tmp_path_factory.mktemp("recorded_run")
    run = copy_run(tiny_full_run[0], tmp / "run")
    figs = f"run.figures_dir={tmp / 'fig'}"
    assert (run / "evaluate" / "latency.parquet").is_file()
    return run, figs


def _evaluate_state(run, figs):
    st = saber("status", "--run-dir", run, "--params", TINY, "--set", figs, "--verify")
    return status_states(st.stdout)["evaluate"]


@needs_data("sources")
def test_a_deleted_or_damaged_timing_table_is_not_done(evaluated, tmp_path):
    # old: `saber status --verify` showed evaluate "done" with latency.parquet deleted or cut short
    src, figs = evaluated
    assert _evaluate_state(src, figs)[0] == "done"
    run = copy_run(src, tmp_path / "run")
    lat = run / "evaluate" / "latency.parquet"
    keep = tmp_path / "latency.parquet"
    shutil.copy2(lat, keep)
    lat.unlink()
    state, why = _evaluate_state(run, figs)
    assert state == "modified" and any(f"{lat} (deleted)" in w for w in why), why
    data = keep.read_bytes()
    lat.write_bytes(data[: len(data) // 2])            # cut short: no longer a Parquet file
    state, why = _evaluate_state(run, figs)
    assert state == "modified" and any(f"{lat} (not a readable Parquet file)" in w for w in why), why
    shutil.copy2(keep, lat)                            # put back: done again
    assert _evaluate_state(run, figs)[0] == "done"
    # its numbers are run-to-run noise, out of the output hash: a readable table with other seconds
    # keeps the stage done (what is checked is that the table is there and readable)
    t = pl.read_parquet(lat)
    t.with_columns(pl.col(c) * 2 for c, d in t.schema.items() if d.is_float()).write_parquet(lat)
    assert _evaluate_state(run, figs)[0] == "done"


# --------------------------------------------------------------------------- a run folder that is a file
@pytest.mark.parametrize("under", [False, True])
def test_saber_run_with_a_run_dir_that_is_a_file_is_one_line(tmp_path, under):
    # old: FileExistsError / NotADirectoryError traceback from the runner's mkdir
    afile = tmp_path / "run.txt"
    afile.write_text("not a run\n")
    run_dir = afile / "sub" if under else afile
    msg = _one_line(saber("run", "corpus", "--params", TINY, "--run-dir", run_dir), run_dir, afile, code=1)
    assert "is a file, not a folder" in msg and afile.read_text() == "not a run\n"
