"""Each parameter's default lives in one place, ``params/paper.yaml`` (the paper's value of every key;
``core/config.py`` holds only types and ranges, no defaults): every stage notebook's parameters cell is
generated from it (``tools/sync_parameter_cells.py``) and, read with papermill's notebook
inspection, must name the same value for every key of the stage's sections."""
import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import papermill
import pytest

from saber_lib.core import config
from saber_lib.core.config_types import ProfileError
from saber_lib.core.stage_params import RUN_PARAMETERS, StageParams
from saber_lib.pipeline.stages import STAGES

ROOT = Path(__file__).resolve().parent.parent
PAPER = config.load_profile(ROOT / "params" / "paper.yaml")
# keys of the run section that the runner sets per run (paths, the run's name), not a paper value
PER_RUN = {"run_dir", "run_name", "data_dir", "cache_dir", "figures_dir"}


def _profile_defaults(stage) -> dict:
    values = {**PAPER.values["run"]}
    for sec in stage.sections:
        if sec == "llm":
            values["llm"] = PAPER.section("llm")
        else:
            values.update(PAPER.values[sec])
    return values


@pytest.mark.parametrize("stage", STAGES, ids=[s.name for s in STAGES])
def test_notebook_parameter_cells_agree_with_the_paper_profile(stage):
    cell = papermill.inspect_notebook(str(ROOT / "notebooks" / stage.notebook))
    paper = _profile_defaults(stage)
    drift = {}
    for name, p in cell.items():
        if name in PER_RUN or name not in paper:
            continue
        value = ast.literal_eval(p["default"])
        if value != paper[name] or type(value) is not type(paper[name]):
            drift[name] = (value, paper[name])
    assert drift == {}, f"{stage.notebook}: parameters cell vs params/paper.yaml (cell, paper): {drift}"
    missing = sorted(set(paper) - set(cell) - PER_RUN - {"executor", "dask_scheduler", "dask_workers", "verify_after_h"})
    assert missing == [], f"{stage.notebook}: keys of its sections missing from its parameters cell: {missing}"


def test_the_generator_finds_no_drift_and_rewrites_a_drifted_cell():
    out = subprocess.run([sys.executable, "tools/sync_parameter_cells.py", "--check"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "would change: none", out.stdout + out.stderr
    spec = importlib.util.spec_from_file_location("sync_parameter_cells", ROOT / "tools" / "sync_parameter_cells.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    stage = next(s for s in STAGES if s.name == "ontology")
    old = "# ontology\nontology_file = 'elsewhere.json'   # the tree\nstale_key = 3\nrun_name = 'mine'\n"
    new = tool.parameters_source(stage, old, PAPER)
    cell = {line.split(" = ", 1)[0]: ast.literal_eval(line.split("   #")[0].split(" = ", 1)[1])
            for line in new.splitlines() if " = " in line}
    assert cell["ontology_file"] == PAPER.values["ontology"]["ontology_file"] != "elsewhere.json"
    assert "ontology_file = " in new and "   # the tree" in new and "stale_key" not in new
    assert cell["run_name"] == "mine" and cell["seed"] == PAPER.values["run"]["seed"]


def test_stage_params_hold_exactly_the_stage_keys_checked_by_the_schema():
    stage = next(s for s in STAGES if s.name == "tournament")
    namespace = {**PAPER.values["tournament"], "llm": PAPER.section("llm"), "run_dir": "r", "run_name": "n",
                 "seed": 3, "data_dir": None, "cache_dir": "c", "figures_dir": "f", "threads": 0,
                 "bench": "a notebook variable", "ctx": object()}
    params = StageParams.of(stage.sections, namespace)
    assert set(params) == set(PAPER.values["tournament"]) | {"llm"} | set(RUN_PARAMETERS)
    assert params["rounds"] == PAPER.values["tournament"]["rounds"] and params["seed"] == 3
    with pytest.raises(KeyError, match="'bench' is not a parameter of the sections tournament, llm"):
        params["bench"]
    with pytest.raises(ProfileError, match=r"parameter rounds \(tournament.rounds\)"):
        StageParams.of(stage.sections, {**namespace, "rounds": "twenty"})
