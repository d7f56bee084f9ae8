"""Fault cases of what a stage's record covers: a file or folder named by a parameter (the ontology
file, the released benchmark folder, the replay cassette, ...) is an input of the stages taking its
section; the tables and figures a stage wrote are among its recorded outputs; ``saber status
--check`` exits 1 for scripts when any stage is not done.

Real processes through the command line on copies of the session's tiny run (conftest), and the
runner's input hashes in this process for a folder-valued key.
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import copy_run, status_states
from saber_lib.core.data import resolve_data_dir
from saber_lib.pipeline import integrity, runner
from saber_lib.pipeline.stages import BY_NAME

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "params" / "tiny.yaml")
DATA = resolve_data_dir()

pytestmark = pytest.mark.pipeline        # runs notebooks / the command line in real processes


def saber(*args, timeout=900):
    return subprocess.run([sys.executable, "-m", "saber_lib.pipeline.cli", *map(str, args)], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          timeout=timeout)


def status(run_dir, *extra) -> tuple[int, dict]:
    """(exit status, stage -> (state, [reason lines])) of ``saber status``."""
    r = saber("status", "--run-dir", run_dir, "--params", TINY, *extra)
    assert r.returncode in (0, 1) and not r.stderr.strip(), r.stderr
    return r.returncode, status_states(r.stdout)


@pytest.fixture
def run(tiny_tournament_run, tmp_path):
    return copy_run(tiny_tournament_run[0], tmp_path / "run")


# --------------------------------------------------------------------------- file-valued parameters
def test_an_edited_ontology_file_named_by_a_parameter_makes_the_stage_stale(run, tmp_path):
    # old: with ontology.ontology_file=alt.json, an edit of alt.json left the ontology stage "up to date"
    alt = tmp_path / "alt.json"
    shutil.copyfile(DATA / "ontology" / "mathworld_tree.json", alt)
    args = ("--set", f"ontology.ontology_file={alt}", "--set", f"run.figures_dir={tmp_path / 'fig'}")
    r = saber("run", "ontology", "--params", TINY, "--run-dir", run, *args)
    assert r.returncode == 0 and "[run ] ontology" in r.stdout, r.stdout + r.stderr
    assert status(run, *args)[1]["ontology"] == ("done", [])

    alt.write_text(json.dumps(json.loads(alt.read_text()), indent=1))  # the same tree, other bytes
    code, states = status(run, *args)
    assert states["ontology"] == ("stale", [f"input ontology.ontology_file = {alt} changed"]), states["ontology"]
    r = saber("run", "ontology", "--params", TINY, "--run-dir", run, *args)
    assert r.returncode == 0 and "[run ] ontology (stale)" in r.stdout, r.stdout + r.stderr
    assert status(run, *args)[1]["ontology"] == ("done", [])
    man = json.loads((run / "ontology" / "manifest.json").read_text())
    assert man["input_hashes"]["input:ontology.ontology_file"] == integrity.hash_file(alt)


def test_a_folder_valued_parameter_is_hashed_file_by_file(tmp_path):
    # old: the released stage hashed only its queries and documents files, the llm stages no cassette
    bench = tmp_path / "bench"
    (bench / "extra").mkdir(parents=True)
    for name in ("queries.jsonl", "documents.jsonl", "extra/notes.txt"):
        (bench / name).write_text(f"{name}\n")
    cassette = tmp_path / "answers.jsonl"
    cassette.write_text('{"key": "k", "text": "t"}\n')
    prof = runner.load_run_profile(TINY, {"released.benchmark_dir": str(bench), "llm.cassette": str(cassette),
                                      "run.figures_dir": str(tmp_path / "fig")})
    ctx = runner.RunContext(prof, (tmp_path / "run").resolve())
    released = BY_NAME["released"]
    first = runner.input_hashes(ctx, released)
    key = "input:released.benchmark_dir"
    listing = "".join(f"{name}\0{integrity.hash_file(bench / name)}\n"          # sorted relative paths
                      for name in ("documents.jsonl", "extra/notes.txt", "queries.jsonl"))
    assert first[key] == hashlib.sha256(listing.encode()).hexdigest()
    # an llm stage hashes the cassette its llm section names
    assert runner.input_hashes(ctx, BY_NAME["topics"])["input:llm.cassette"] == integrity.hash_file(cassette)
    assert "input:llm.cassette" not in runner.input_hashes(ctx, BY_NAME["select"])

    man = {"param_hash": runner.param_hash(ctx, released), "input_hashes": first, "outputs": {},
           "output_hash": integrity.output_hash_of({})}
    (ctx.run_dir / "released").mkdir(parents=True)
    (ctx.run_dir / "released" / "manifest.json").write_text(json.dumps(man))
    assert runner.stage_state(ctx, released, {}) == "done"
    (bench / "extra" / "notes.txt").write_text("edited\n")          # a file the old list did not cover
    why: dict = {}
    assert runner.stage_state(ctx, released, {}, why=why) == "stale"
    assert why["released"] == [f"input released.benchmark_dir = {bench} changed"]
    (bench / "extra" / "notes.txt").write_text("extra/notes.txt\n")  # as it was: done again
    assert runner.stage_state(ctx, released, {}) == "done"
    (bench / "extra" / "more.txt").write_text("a new file\n")        # an added file counts too
    assert runner.stage_state(ctx, released, {}) == "stale"


# --------------------------------------------------------------------------- tables and figures
def test_tables_and_figures_are_recorded_outputs(run, tmp_path):
    # old: with the figures folder moved away the stage was "up to date" and drew nothing again;
    # an edited table passed `saber status --verify`
    fig = tmp_path / "fig" / "run"
    args = ("--params", TINY, "--run-dir", run, "--set", f"run.figures_dir={tmp_path / 'fig'}")
    r = saber("run", "ontology", "--force", *args)
    assert r.returncode == 0, r.stdout + r.stderr
    drawn = sorted(p.name for p in fig.iterdir() if p.name.startswith("ontology_"))
    assert "ontology_areas.md" in drawn and "ontology_depths.png" in drawn

    fig.rename(tmp_path / "moved")
    code, states = status(run, "--check", "--set", f"run.figures_dir={tmp_path / 'fig'}")
    assert states["ontology"][0] == "stale" and code == 1
    assert f"{fig / 'ontology_areas.md'} (table or figure) is missing" in states["ontology"][1]
    r = saber("run", "ontology", *args)
    assert r.returncode == 0 and "[run ] ontology (stale)" in r.stdout, r.stdout + r.stderr
    assert sorted(p.name for p in fig.iterdir() if p.name.startswith("ontology_")) == drawn
    man = json.loads((run / "ontology" / "manifest.json").read_text())
    assert sorted(Path(p).name for p in man["figure_outputs"]) == drawn
    assert man["figures"] == str(fig) and man["outputs"] and man["info"]["tables"]   # the old fields stay

    table = fig / "ontology_areas.md"
    st = table.stat()
    text = table.read_text()
    table.write_text(text.replace("|", "!", 1))                      # same size, mtime put back
    os.utime(table, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert status(run, "--set", f"run.figures_dir={tmp_path / 'fig'}")[1]["ontology"] == ("done", [])
    code, states = status(run, "--verify", "--set", f"run.figures_dir={tmp_path / 'fig'}")
    assert states["ontology"] == ("modified", [f"{table} (table or figure) changed since the stage wrote it"])
    r = saber("run", "ontology", "--verify", *args)
    assert r.returncode == 1 and str(table) in r.stderr and "saber accept ontology" in r.stderr
    r = saber("accept", "ontology", "--run-dir", run)                 # keeping the edit records it
    assert r.returncode == 0, r.stderr
    assert status(run, "--verify", "--set", f"run.figures_dir={tmp_path / 'fig'}")[1]["ontology"][0] == "done"


# --------------------------------------------------------------------------- status for scripts
def test_status_check_exits_1_when_a_stage_is_not_done(run, tmp_path):
    # old: `saber status` had no --check (exit 2: unrecognised argument); plain status stays 0
    plain = saber("status", "--run-dir", run, "--params", TINY)
    assert plain.returncode == 0 and "inversions         missing" in plain.stdout
    check = saber("status", "--run-dir", run, "--params", TINY, "--check")
    assert check.returncode == 1 and check.stdout == plain.stdout and not check.stderr


def test_status_check_exits_0_when_every_stage_is_done(tmp_path, monkeypatch, capsys):
    import nbformat
    from saber_lib.pipeline import cli, stages

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    cell = nbformat.v4.new_code_cell("run_dir = ''\nfigures_dir = ''\n")
    cell.metadata["tags"] = ["parameters"]
    nb.cells = [cell, nbformat.v4.new_code_cell(
        "from saber_lib.pipeline.context import StageContext\n"
        "StageContext(run_dir, 'only', figures_dir=figures_dir).path('x.txt').write_text('x')\n")]
    (tmp_path / "nbs").mkdir()
    nbformat.write(nb, tmp_path / "nbs" / "only.ipynb")
    fake = (stages.Stage("only", "only.ipynb", (), ("distributions",)),)
    monkeypatch.setattr(stages, "STAGES", fake)
    monkeypatch.setattr(stages, "BY_NAME", {s.name: s for s in fake})
    monkeypatch.setattr(runner, "NOTEBOOK_DIR", tmp_path / "nbs")
    run_dir, fig = tmp_path / "run", f"run.figures_dir={tmp_path / 'fig'}"
    status_args = ["status", "--run-dir", str(run_dir), "--params", TINY, "--set", fig, "--check"]
    assert cli.main(status_args) == 1                                    # missing
    assert cli.main(["run", "all", "--params", TINY, "--run-dir", str(run_dir), "--set", fig]) == 0
    capsys.readouterr()
    assert cli.main(status_args) == 0 and capsys.readouterr().out.split()[:2] == ["only", "done"]
    assert cli.main([*status_args[:-1], "--set", "distributions.dist_top_k=7", "--check"]) == 1   # stale
    assert cli.main(status_args[:-1] + ["--set", "distributions.dist_top_k=7"]) == 0              # plain: 0
