"""Fault cases of the runner's inputs and outputs: files outside the run directory that a stage
reads (its notebook, the library code it runs, the published results), an edit that keeps a file's
size and restores its mtime, ``saber export`` on a changed or unfinished run, and outputs of an
earlier execution that linger in the figures folder (or in another run's folder of the same name).

Real processes through the command line where the user would see the result; the in-process
checks point the runner at copies of the notebooks and of the library, never at the real ones.
The stages up to the tournament run once per session (conftest); each test works on a copy.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from conftest import status_states
from saber_lib.core import config
from saber_lib.core.data import resolve_data_dir
from saber_lib.pipeline import integrity, runner
from saber_lib.pipeline.stages import BY_NAME
from saber_lib.core.config_types import ProfileError
from saber_lib.core.data import hash_file

ROOT = Path(__file__).resolve().parent.parent.parent
TINY = str(ROOT / "params" / "tiny.yaml")
DATA = resolve_data_dir()
FAST_EVAL = ["--set", "evaluate.retrievers=[bm25]", "--set", "evaluate.n_bootstrap=10"]


def saber(*args, cwd=None, timeout=900):
    return subprocess.run([sys.executable, "-m", "saber_lib.pipeline.cli", *map(str, args)], cwd=cwd or ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          timeout=timeout)


def run_args(run_dir, *stages, extra=()):
    return ("run", *stages, "--params", TINY, "--run-dir", run_dir,
            "--set", f"run.figures_dir={Path(run_dir).parent / 'fig'}", *extra)


def status_lines(run_dir, *extra) -> dict:
    """stage -> (state, [reason lines]) from ``saber status``."""
    r = saber("status", "--run-dir", run_dir, "--params", TINY, *extra)
    assert r.returncode == 0, r.stderr
    return status_states(r.stdout)


def error_line(r) -> str:
    assert r.returncode != 0, r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


@pytest.fixture
def run(tiny_tournament_run, tmp_path):
    d = tmp_path / "run"
    shutil.copytree(tiny_tournament_run[0], d, ignore=shutil.ignore_patterns(integrity.LOCK_FILE))
    return d


def _ctx(run_dir, **overrides):
    return runner.RunContext(runner.load_run_profile(TINY, overrides), Path(run_dir).resolve())


# --------------------------------------------------------------------------- notebooks and library code
@pytest.mark.pipeline   # on copies of the session's tiny run (built by the command line)
def test_an_edited_notebook_or_library_module_makes_its_stages_stale(run, tmp_path, monkeypatch):
    # old: editing a stage's notebook or the code it runs left the stage "done" (and skipped)
    nbs = tmp_path / "notebooks"
    shutil.copytree(ROOT / "notebooks", nbs)
    monkeypatch.setattr(runner, "NOTEBOOK_DIR", nbs)
    ctx = _ctx(run)
    built = ["corpus", "ontology", "topics", "summaries", "signals", "thresholds", "select", "tournament"]
    assert [runner.status(ctx)[s] for s in built] == ["done"] * len(built)  # copies: same bytes, same hashes

    nb = nbs / "07_tournament.ipynb"
    doc = json.loads(nb.read_text())
    doc["cells"].append({"cell_type": "code", "execution_count": None, "id": "edit0001", "metadata": {},
                         "outputs": [], "source": ["ratings = ratings.head(1)\n"]})
    nb.write_text(json.dumps(doc))
    logs: list[str] = []
    st = runner.print_status(TINY, run, log=logs.append)
    assert st["tournament"] == "stale" and st["select"] == "done"
    assert "    - notebook:07_tournament.ipynb changed" in logs

    shutil.copy2(ROOT / "notebooks" / "07_tournament.ipynb", nb)
    from saber_lib.pipeline import sources

    lib = tmp_path / "lib" / "saber_lib"
    shutil.copytree(ROOT / "saber_lib", lib, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(sources, "LIB_DIR", lib)
    assert runner.status(ctx)["tournament"] == "done"
    # the tournament draws its rating intervals with this module; the stages before it never import it
    mod = lib / "judging" / "draws.py"
    mod.write_text(mod.read_text() + "\nEDITED = True\n")
    logs.clear()
    st = runner.print_status(TINY, run, log=logs.append)
    assert st["tournament"] == "stale" and [st[s] for s in built[:-1]] == ["done"] * (len(built) - 1)
    assert "    - code:saber_lib/judging/draws.py changed" in logs


def test_evaluate_reads_its_notebook_and_the_evaluation_code():
    from saber_lib.pipeline import sources

    inputs = runner.input_hashes(_ctx(ROOT / "runs" / "never-made"), BY_NAME["select"])
    assert inputs["notebook:06_select.ipynb"] == hash_file(ROOT / "notebooks" / "06_select.ipynb")
    files = sources.library_files(sources.notebook_imports(ROOT / "notebooks" / "09_evaluate.ipynb"))
    rel = {str(f.relative_to(ROOT)) for f in files}
    assert {"saber_lib/evaluate/tables.py", "saber_lib/retrieval/lexical.py", "saber_lib/pipeline/context.py"} <= rel
    assert "saber_lib/pipeline/runner.py" not in rel  # the notebook never imports the runner


def _writable_copy(src: Path, dst: Path) -> Path:
    for f in src.rglob("*.json"):
        (dst / f.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, dst / f.relative_to(src))
    return dst


@pytest.mark.pipeline   # on copies of the session's tiny run (built by the command line)
def test_published_files_are_inputs_of_the_leaderboard_stage(run, tmp_path):
    # old: after the leaderboard stage ran, a changed published file left it "up to date"
    pub = _writable_copy(DATA / "published", tmp_path / "published")
    sets = ["--set", f"leaderboard.published_dir={pub}", "--set", "leaderboard.lb_n_resamples=20"]
    r = saber(*run_args(run, "leaderboard", extra=sets))
    assert r.returncode == 0, r.stderr
    assert json.loads((run / "leaderboard" / "manifest.json").read_text())["info"]["n_systems"] == 5
    assert status_lines(run, *sets)["leaderboard"][0] == "done"
    (pub / "evaluation" / "jaccard__p0.json").unlink()
    state, why = status_lines(run, *sets)["leaderboard"]
    assert state == "stale" and why == [f"file:{pub / 'evaluation' / 'jaccard__p0.json'} is no longer read",
                                        f"input leaderboard.published_dir = {pub} changed"]   # the folder too
    r = saber(*run_args(run, "leaderboard", extra=sets))
    assert r.returncode == 0 and "[run ] leaderboard" in r.stdout, r.stderr
    assert json.loads((run / "leaderboard" / "manifest.json").read_text())["info"]["n_systems"] == 4


# --------------------------------------------------------------------------- full verification
def _same_size_edit(path: Path) -> None:
    """Flip one byte in the middle of the file, keeping its size, and put its mtime back."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_mtime_ns == st.st_mtime_ns and path.stat().st_size == st.st_size


@pytest.mark.pipeline   # on copies of the session's tiny run (built by the command line)
def test_verify_finds_a_same_size_edit_with_restored_mtime(run):
    # old: no --verify; such an edit was never noticed
    ratings = run / "tournament" / "ratings.parquet"
    _same_size_edit(ratings)
    assert status_lines(run)["tournament"][0] == "done"  # the quick check (size, mtime) cannot see it
    st = status_lines(run, "--verify")
    assert st["tournament"] == ("modified", [f"{ratings} changed since the stage wrote it"])
    line = error_line(saber(*run_args(run, "evaluate", extra=[*FAST_EVAL, "--verify"])))
    assert str(ratings) in line and "saber run tournament --force" in line
    assert not (run / "evaluate").exists()
    # a manifest older than run.verify_after_h gets the full check without --verify
    line = error_line(saber(*run_args(run, "evaluate", extra=[*FAST_EVAL, "--set", "run.verify_after_h=0"])))
    assert str(ratings) in line
    man_path = run / "tournament" / "manifest.json"
    man = json.loads(man_path.read_text())
    man["finished_at"] = "2020-01-01T00:00:00+0000"
    man_path.write_text(json.dumps(man))
    assert status_lines(run)["tournament"][0] == "modified"  # paper.yaml: 24 hours


def test_verify_after_h_is_validated(tmp_path):
    for bad, msg in ((-1, "below the minimum"), ("soon", "expected a number")):
        with pytest.raises(ProfileError, match=f"run.verify_after_h.*{msg}"):
            config.load_profile(TINY, {"run.verify_after_h": bad})


# --------------------------------------------------------------------------- export
@pytest.mark.pipeline   # on copies of the session's tiny run (built by the command line)
def test_export_reads_only_finished_and_intact_stages(run, tiny_tournament_run, tmp_path):
    # old: a modified tournament, or one without a manifest, was exported with exit 0
    out = tmp_path / "beir"
    ratings = run / "tournament" / "ratings.parquet"
    pl.read_parquet(ratings).with_columns(pl.col("rating") * 0).write_parquet(ratings)
    line = error_line(saber("export", "--run-dir", run, "--out", out))
    assert line == error_line(saber(*run_args(run, "evaluate", extra=FAST_EVAL)))  # the runner's own error
    assert str(ratings) in line and "saber accept tournament" in line
    assert not out.exists()

    (run / "tournament" / "manifest.json").unlink()
    line = error_line(saber("export", "--run-dir", run, "--out", out))
    assert "stage 'tournament' has not finished" in line and "saber run tournament" in line
    assert not out.exists()

    finished = tiny_tournament_run[0]
    _same_size_edit(run / "corpus" / "corpus.parquet")  # export hashes everything it reads
    (run / "tournament").rename(tmp_path / "aside")
    shutil.copytree(finished / "tournament", run / "tournament")
    line = error_line(saber("export", "--run-dir", run, "--out", out))
    assert str(run / "corpus" / "corpus.parquet") in line

    r = saber("export", "--run-dir", finished, "--out", out)  # the intact run exports
    assert r.returncode == 0, r.stderr
    assert (out / "qrels" / "test.tsv").is_file()


@pytest.mark.pipeline   # on copies of the session's tiny run (built by the command line)
def test_export_owns_its_output_folder(tiny_tournament_run, tmp_path):
    finished = tiny_tournament_run[0]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    line = error_line(saber("export", "--run-dir", finished, "--out", mine))
    assert str(mine) in line and "not empty" in line
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    out = tmp_path / "beir"
    assert saber("export", "--run-dir", finished, "--out", out).returncode == 0
    assert saber("export", "--run-dir", finished, "--out", out).returncode == 0   # its own files: replaced
    (out / "qrels" / "old.tsv").write_text("not written by the export\n")   # kept: the export refuses
    line = error_line(saber("export", "--run-dir", finished, "--out", out))
    assert str(out / "qrels" / "old.tsv") in line and (out / "qrels" / "old.tsv").is_file()


# --------------------------------------------------------------------------- the figures folder
@pytest.mark.pipeline   # on copies of the session's tiny run (built by the command line)
def test_evaluate_rerun_with_fewer_settings_leaves_no_old_tables(run):
    # old: evaluate_settings.md of the first execution stayed beside the second one's tables
    fig = run.parent / "fig" / "run"
    r = saber(*run_args(run, "evaluate", extra=FAST_EVAL))
    assert r.returncode == 0, r.stderr
    assert (fig / "evaluate_settings.md").is_file() and (fig / "evaluate_main.md").is_file()
    r = saber(*run_args(run, "evaluate", extra=[*FAST_EVAL, "--set", "evaluate.settings=[statement-full]"]))
    assert r.returncode == 0, r.stderr
    assert not (fig / "evaluate_settings.md").exists() and not (fig / "evaluate_settings.tex").exists()
    assert (fig / "evaluate_main.md").is_file()
    man = json.loads((run / "evaluate" / "manifest.json").read_text())
    assert man["figures"] == str(fig)
    assert {Path(p).name for p in man["info"]["tables"]} == {p.name for p in fig.glob("evaluate_*") if
                                                             p.suffix in (".md", ".tex")}


@pytest.mark.pipeline   # on copies of the session's tiny run (built by the command line)
def test_two_run_dirs_of_one_name_do_not_share_a_figures_folder(run, tiny_tournament_run, tmp_path):
    # old: both wrote (and overwrote) <figures_dir>/run/ without any lock between them
    fig_root = tmp_path / "fig"
    r = saber(*run_args(run, "thresholds", extra=["--force"]))
    assert r.returncode == 0, r.stderr
    before = {p.name: p.stat().st_mtime_ns for p in (fig_root / "run").iterdir()}
    other = tmp_path / "elsewhere" / "run"
    shutil.copytree(tiny_tournament_run[0], other, ignore=shutil.ignore_patterns(integrity.LOCK_FILE))
    args = ("run", "thresholds", "--force", "--params", TINY, "--run-dir", other,
            "--set", f"run.figures_dir={fig_root}")
    line = error_line(saber(*args))
    assert f"figures folder {fig_root / 'run'} belongs to run {run.resolve()}" in line and str(other) in line
    assert {p.name: p.stat().st_mtime_ns for p in (fig_root / "run").iterdir()} == before
    assert json.loads((fig_root / "run" / integrity.FIGURES_OWNER).read_text())["run_dir"] == str(run.resolve())
    shutil.rmtree(run)  # the owner is gone: the folder is taken over, and said so
    r = saber(*args)
    assert r.returncode == 0, r.stderr
    assert "now belongs to" in r.stdout
    assert json.loads((fig_root / "run" / integrity.FIGURES_OWNER).read_text())["run_dir"] == str(other.resolve())
