"""Rewrite every stage notebook's parameters cell from the profile schema's sections and
``params/paper.yaml`` (the one place each default lives): one line ``key = value`` per key of the
stage's sections (a dict section such as ``llm`` as one dict), then the run keys the runner injects.
A comment written after a key in the old cell is kept. ``--check`` rewrites nothing and exits 1
naming the notebooks that would change; ``tests/test_notebook_defaults.py`` runs it and checks the
cells with papermill's notebook inspection.

    python tools/sync_parameter_cells.py [--check]
"""
from __future__ import annotations

import ast
import io
import sys
import tokenize
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from saber_lib.core import config  # noqa: E402
from saber_lib.core.stage_params import PARALLEL_PARAMETERS, RUN_PARAMETERS  # noqa: E402
from saber_lib.pipeline.stages import STAGES  # noqa: E402

HEADER = "# Parameters (papermill injects the profile's values after this cell)"
EXAMPLE_RUN = {"run_dir": "runs/demo", "run_name": "demo"}   # the runner sets both per run


def _old_cell(source: str) -> tuple[dict, dict]:
    """(name -> value, name -> trailing comment) of the assignments of an old parameters cell."""
    values, comments = {}, {}
    by_line = {tok.start[0]: tok.string for tok in tokenize.generate_tokens(io.StringIO(source + "\n").readline)
               if tok.type == tokenize.COMMENT}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            try:
                values[name] = ast.literal_eval(node.value)
            except ValueError:
                pass
            if node.end_lineno in by_line:
                comments[name] = by_line[node.end_lineno]
    return values, comments


def parameters_source(stage, old: str, paper: config.Profile) -> str:
    values, comments = _old_cell(old)

    def line(name, value):
        text = f"{name} = {value!r}"
        return f"{text}   {comments[name]}" if name in comments else text

    out = [HEADER]
    for sec in stage.sections:
        out.append(f"# {sec}")
        if sec in config.DICT_SECTIONS:
            out.append(line(sec, paper.section(sec)))
        else:
            out += [line(k, v) for k, v in paper.values[sec].items()]
    out.append("# run (the runner sets these for each run)")
    run = paper.values["run"]
    for name in RUN_PARAMETERS + (PARALLEL_PARAMETERS if stage.parallel else ()):
        out.append(line(name, values.get(name, EXAMPLE_RUN.get(name)) if name in EXAMPLE_RUN else run[name]))
    return "\n".join(out)


def sync(check: bool) -> list[str]:
    """The notebooks whose parameters cell differs from the generated one (rewritten unless ``check``)."""
    paper = config.load_profile(ROOT / "params" / "paper.yaml")
    changed = []
    for stage in STAGES:
        path = ROOT / "notebooks" / stage.notebook
        nb = nbformat.read(path, as_version=4)
        cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
        new = parameters_source(stage, cell.source, paper)
        if new != cell.source:
            changed.append(stage.notebook)
            if not check:
                cell.source = new
                nbformat.write(nb, path)
    return changed


def main(argv) -> int:
    check = "--check" in argv
    changed = sync(check)
    print(("would change: " if check else "rewritten: ") + (", ".join(changed) or "none"))
    return 1 if changed and check else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
