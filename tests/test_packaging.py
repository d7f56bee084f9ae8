"""environment.yml and pyproject.toml list the same dependencies; torch is pinned to the CPU build."""
import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def _name(req: str) -> str:
    return re.split(r"[<>=!~\[ ;]", req, maxsplit=1)[0].lower().replace("_", "-")


def installed_extras() -> list[str]:
    """The extras the Makefile's install step installs (``pip install -e ".[a,b,...]"``), and the ``docs``
    extra its ``docs`` target adds (environment.yml lists it too: a conda user builds the site)."""
    text = (ROOT / "Makefile").read_text()
    m = re.search(r'-e "\.\[([\w,-]+)\]"', text)
    assert m, "Makefile: no pip install -e \".[extras]\" line"
    docs = re.search(r'^docs:.*\n(?:\t.*\n)*?\t.*-e "\.\[docs\]"', text, re.M)
    assert docs, "Makefile: the docs target does not install the docs extra"
    return m.group(1).split(",") + ["docs"]


def _pyproject_reqs() -> dict[str, str]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(data["dependencies"])
    for extra in installed_extras():
        reqs += data["optional-dependencies"].get(extra, [])
    return {_name(r): r.replace(" ", "") for r in reqs}


def _conda_reqs() -> dict[str, str]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    return {_name(r): r.replace(" ", "") for r in pip}


def test_environment_yml_matches_pyproject():
    py, conda = _pyproject_reqs(), _conda_reqs()
    assert sorted(set(py) - set(conda)) == [], "in pyproject.toml but not environment.yml"
    assert sorted(set(conda) - set(py)) == [], "in environment.yml but not pyproject.toml"
    for name in py:
        assert py[name] == conda[name], f"{name}: pyproject {py[name]!r} vs environment.yml {conda[name]!r}"


def test_torch_is_pinned_to_the_cpu_build_everywhere():
    for reqs in (_pyproject_reqs(), _conda_reqs()):
        if "torch" in reqs:
            assert reqs["torch"] == "torch==2.13.0"
    assert "torch==2.13.0" in (ROOT / "Makefile").read_text()


def test_notebooks_are_committed_clean():
    import nbformat

    for nb_path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = nbformat.read(nb_path, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert code and "parameters" in code[0].metadata.get("tags", []), f"{nb_path.name}: no parameters cell"
        for c in code:
            assert not c.get("outputs"), f"{nb_path.name} has outputs"
            assert c.get("execution_count") is None, f"{nb_path.name} has execution counts"


def test_every_stage_has_its_notebook():
    from saber_lib.pipeline.stages import STAGES

    missing = [s.notebook for s in STAGES if not (ROOT / "notebooks" / s.notebook).exists()]
    assert missing == []


def test_parameters_cells_declare_every_injected_knob():
    """Each notebook's parameters cell assigns every name the runner injects for its stage."""
    import ast

    import nbformat

    from saber_lib.core import config as cfg
    from saber_lib.pipeline.stages import STAGES

    base = {"run_dir", "run_name", "seed", "data_dir", "cache_dir", "figures_dir", "threads"}
    for s in STAGES:
        path = ROOT / "notebooks" / s.notebook
        if not path.exists():
            continue
        cell = nbformat.read(path, as_version=4).cells
        src = next(c.source for c in cell if c.cell_type == "code")
        names = {t.id for node in ast.walk(ast.parse(src)) if isinstance(node, ast.Assign)
                 for t in node.targets if isinstance(t, ast.Name)}
        want = set(base)
        for sec in s.sections:
            want |= {sec} if sec in cfg.DICT_SECTIONS else set(cfg.SCHEMA[sec])
        assert sorted(want - names) == [], f"{s.notebook}: parameters cell lacks {sorted(want - names)}"
