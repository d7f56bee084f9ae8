"""The runner on three throwaway stages: skip when up to date, rerun downstream, fail loudly."""
import json
from pathlib import Path

import nbformat
import pytest

from saber_lib.core import config as cfg
from saber_lib.pipeline import integrity, runner, stages

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.pipeline        # runs notebooks / the command line in real processes (not in make test-fast)

PARAMS = "run_dir = ''\nrun_name = ''\nseed = 0\ndata_dir = ''\ncache_dir = ''\nfigures_dir = ''\nthreads = 0\n"


def _nb(path: Path, params: str, body: str):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    c = nbformat.v4.new_code_cell(PARAMS + params)
    c.metadata["tags"] = ["parameters"]
    nb.cells = [c, nbformat.v4.new_code_cell(body)]
    nbformat.write(nb, path)


@pytest.fixture
def fake_pipeline(tmp_path, monkeypatch):
    nbdir = tmp_path / "nbs"
    nbdir.mkdir()
    ctx = "from saber_lib.pipeline.context import StageContext\nctx = StageContext(run_dir, '{s}', figures_dir=figures_dir)\n"
    _nb(nbdir / "a.ipynb", "example_query = 0\n",
        ctx.format(s="a") + "ctx.path('a.txt').write_text(str(example_query))\nctx.record(backend='none')\n")
    _nb(nbdir / "b.ipynb", "ablation_bootstrap = 1\n",
        ctx.format(s="b") + "x = int(ctx.input('a', 'a.txt').read_text())\n"
        "ctx.path('b.txt').write_text(str(x * ablation_bootstrap))\n")
    _nb(nbdir / "c.ipynb", "ontology_file = ''\n",
        ctx.format(s="c") + "ctx.path('c.txt').write_text(ontology_file)\n"
        "assert ontology_file != 'boom', 'planted failure'\n"
        "if ontology_file == 'killed':  # a worker killed mid-write leaves its temporary file\n"
        "    ctx.path('part.parquet.tmp4242').write_text('half')\n")
    fake = (stages.Stage("a", "a.ipynb", (), ("distributions",)),
            stages.Stage("b", "b.ipynb", ("a",), ("signal_ablation",)),
            stages.Stage("c", "c.ipynb", (), ("ontology",)))
    monkeypatch.setattr(stages, "STAGES", fake)
    monkeypatch.setattr(stages, "BY_NAME", {s.name: s for s in fake})
    monkeypatch.setattr(runner, "NOTEBOOK_DIR", nbdir)
    return tmp_path


def _run(tmp, **ov):
    overrides = {"run.figures_dir": str(tmp / "fig"), **ov}
    logs = []
    res = runner.run(ROOT / "params" / "tiny.yaml", ["all"], run_dir=tmp / "run", overrides=overrides,
                     log=logs.append)
    return res


def test_skip_and_downstream_rerun(fake_pipeline):
    tmp = fake_pipeline
    assert _run(tmp, **{"distributions.example_query": 3}) == {"a": "ran", "b": "ran", "c": "ran"}
    assert (tmp / "run" / "b" / "b.txt").read_text() == "60"  # 3 * ablation_bootstrap (tiny: 20)
    # second run of the same profile: nothing runs
    assert set(_run(tmp, **{"distributions.example_query": 3}).values()) == {"skipped"}
    # touching a's parameter reruns a and what reads from it, not c
    assert _run(tmp, **{"distributions.example_query": 4}) == {"a": "ran", "b": "ran", "c": "skipped"}
    assert (tmp / "run" / "b" / "b.txt").read_text() == "80"
    # touching b's parameter reruns only b
    res = _run(tmp, **{"distributions.example_query": 4, "signal_ablation.ablation_bootstrap": 2})
    assert res == {"a": "skipped", "b": "ran", "c": "skipped"}
    man = json.loads((tmp / "run" / "a" / "manifest.json").read_text())
    assert {"param_hash", "input_hashes", "output_hash", "packages", "wall_s", "backend"} <= set(man)
    assert man["backend"] == "none"
    assert (tmp / "run" / "notebooks" / "a.ipynb").exists()


def test_status_lists_done_stale_missing(fake_pipeline):
    tmp = fake_pipeline
    _run(tmp, **{"distributions.example_query": 1})
    prof = cfg.load_profile(ROOT / "params" / "tiny.yaml", {"distributions.example_query": 2,
                                                            "run.figures_dir": str(tmp / "fig")})
    states = runner.status(runner.RunContext(prof, (tmp / "run").resolve()))
    assert states == {"a": "stale", "b": "stale", "c": "done"}
    (tmp / "run" / "c" / "manifest.json").unlink()
    states = runner.status(runner.RunContext(prof, (tmp / "run").resolve()))
    assert states["c"] == "missing"


def test_failure_names_cell_error_and_notebook_and_keeps_artifacts(fake_pipeline):
    tmp = fake_pipeline
    with pytest.raises(runner.StageFailed) as e:
        _run(tmp, **{"ontology.ontology_file": "boom"})
    msg = str(e.value)
    assert "planted failure" in msg and "AssertionError" in msg
    assert str(tmp / "run" / "notebooks" / "c.ipynb") in msg
    assert (tmp / "run" / "a" / "manifest.json").exists()  # completed stages kept
    assert not (tmp / "run" / "c" / "manifest.json").exists()  # failed stage is not done


def test_a_half_written_file_is_never_an_output(fake_pipeline):
    tmp = fake_pipeline
    run = tmp / "run"
    # the stage finished its cells but left a temporary file: not recorded done, the file named
    with pytest.raises(runner.StageFailed, match=r"half-written.*part\.parquet\.tmp4242"):
        _run(tmp, **{"ontology.ontology_file": "killed"})
    assert not (run / "c" / "manifest.json").exists() and (run / "c" / "part.parquet.tmp4242").exists()
    # the next run removes the leftover before the stage executes; the outputs are the finished files
    assert _run(tmp, **{"ontology.ontology_file": "ok"})["c"] == "ran"
    man = json.loads((run / "c" / "manifest.json").read_text())
    assert list(man["outputs"]) == ["c.txt"] and not (run / "c" / "part.parquet.tmp4242").exists()
    # a temporary file that appears in a finished stage's folder (a write killed later) is reported
    (run / "c" / "c.txt.tmp999").write_text("half")
    prof = cfg.load_profile(ROOT / "params" / "tiny.yaml", {"ontology.ontology_file": "ok",
                                                            "run.figures_dir": str(tmp / "fig")})
    ctx = runner.RunContext(prof, run.resolve())
    for verify in (False, True):
        why: dict = {}
        assert runner.status(ctx, verify=verify, why=why)["c"] == "modified"
        assert why["c"] == [f"{run.resolve() / 'c' / 'c.txt.tmp999'} (half-written: a write was interrupted "
                            "before its file was complete) changed since the stage wrote it"]
    # accepting the folder drops the temporary file and records the same outputs
    integrity.accept(run, "c", log=lambda m: None)
    assert not (run / "c" / "c.txt.tmp999").exists()
    assert list(json.loads((run / "c" / "manifest.json").read_text())["outputs"]) == ["c.txt"]
    assert runner.status(ctx, verify=True)["c"] == "done"


def test_bad_key_rejected_before_any_stage_runs(fake_pipeline, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"inherit: {ROOT / 'params' / 'tiny.yaml'}\nselect:\n  n_querys: 3\n")
    with pytest.raises(cfg.ProfileError, match="select.n_querys"):
        runner.run(bad, ["all"], run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()
