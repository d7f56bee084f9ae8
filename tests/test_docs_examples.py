"""The documentation runs as written: every shell and Python block of README.md and docs/ is executed
against the tiny profile (``params/demo.yaml`` read as ``params/tiny.yaml``, ``runs/demo`` as a copy
of the session's tiny run), unless the line before it says why it cannot run here
(``<!-- no-test: REASON -->``); those are counted and listed. The generated parts of the site are
checked against the code: each stage page's parameter tables against the profile schema and the
paper's and demo's values, the navigation against the stage list, the command-line reference
against the parsers."""
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import DATA_DIR, copy_run, needs_data
from saber_lib.core import config
from saber_lib.core.config_types import Float, Int, List, Str
from saber_lib.pipeline.stages import STAGES

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import docs_site  # noqa: E402

FENCE = re.compile(r"^( *)```(\w*)[^\n]*\n(.*?)^\1```", re.M | re.S)
RUNNABLE = {"bash": "shell", "sh": "shell", "shell": "shell", "python": "python", "py": "python"}
NO_TEST = re.compile(r"^\s*<!-- no-test: (.+?) -->\s*$")
DOC_FILES = [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))
# the tiny profile stands in for the demo's, a copy of the session's tiny run for runs/demo, the data
# directory for ../shared/data
REWRITES = (("params/demo.yaml", "params/tiny.yaml"), ("runs/demo", "runs/tiny"),
            ("../shared/data", str(DATA_DIR)))


def doc_blocks() -> list[dict]:
    """Every shell or Python block of the docs: file, line, kind, code, and the reason it is not run."""
    out = []
    for path in DOC_FILES:
        text = path.read_text()
        for m in FENCE.finditer(text):
            kind = RUNNABLE.get(m.group(2))
            if kind is None:
                continue
            before = text[:m.start()].rstrip("\n").splitlines()
            reason = NO_TEST.match(before[-1]) if before else None
            out.append({"where": f"{path.relative_to(ROOT)}:{text[:m.start()].count(chr(10)) + 1}", "kind": kind,
                        "code": _dedent(m.group(3), len(m.group(1))), "skip": reason.group(1) if reason else None})
    return out


def _dedent(code: str, n: int) -> str:
    return "\n".join(line[n:] if line[:n].isspace() else line for line in code.splitlines())


def normalized(block: dict) -> str:
    """The code as it runs here (rewritten for the tiny profile), continuation lines joined, spaces
    collapsed: two blocks that say the same run once."""
    code = block["code"]
    for old, new in REWRITES:
        code = code.replace(old, new)
    return block["kind"] + ":" + re.sub(r"[ \t]+", " ", code.replace("\\\n", " ")).strip()


BLOCKS = doc_blocks()
TO_RUN: dict[str, dict] = {}
for _b in BLOCKS:
    if _b["skip"] is None:
        TO_RUN.setdefault(normalized(_b), _b)


# ----------------------------------------------------------------------------- the blocks
def test_every_block_is_run_or_says_why_not():
    """The blocks not run here, counted and listed with their reasons; a no-test marker that stands
    before no shell or Python block is an error (it would silently exempt the next one)."""
    skipped = [b for b in BLOCKS if b["skip"]]
    print(f"\n{len(BLOCKS)} shell/Python blocks in README.md and docs/: {len(TO_RUN)} distinct ones run, "
          f"{len(skipped)} not run here:")
    for b in skipped:
        print(f"  {b['where']}: {b['skip']}")
    assert all(len(b["skip"].split()) >= 3 for b in skipped), "a no-test reason must say why, in words"
    for path in DOC_FILES:
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.strip().startswith("<!-- no-test"):
                assert NO_TEST.match(line), f"{path.name}:{i + 1}: malformed marker {line!r}"
                nxt = lines[i + 1] if i + 1 < len(lines) else ""
                assert re.match(r"\s*```(bash|sh|shell|python|py)\b", nxt), \
                    f"{path.name}:{i + 1}: a no-test marker must stand right before a shell or Python block"


def test_blocks_are_found_where_the_docs_have_them():
    """The block reader against hand-counted cases: a fenced block in a list item, a text block, a marker."""
    text = "a\n<!-- no-test: needs a GPU cluster -->\n```bash\nsaber run all\n```\n\n- item\n\n  ```python\n  x = 1\n  ```\n```text\nnot run\n```\n"
    found = [(RUNNABLE.get(m.group(2)), _dedent(m.group(3), len(m.group(1))).strip()) for m in FENCE.finditer(text)]
    assert found == [("shell", "saber run all"), ("python", "x = 1"), (None, "not run")]
    b = {"kind": "shell", "code": "saber run evaluate --params params/demo.yaml \\\n    --force"}
    assert normalized(b) == "shell:saber run evaluate --params params/tiny.yaml --force"


@pytest.fixture(scope="module")
def sandbox_source(tiny_tournament_run):
    return tiny_tournament_run[0]


def sandbox(tmp_path: Path, tiny_run: Path) -> Path:
    """A folder to run a block in, as a user at the project root would: the examples and test fixtures
    linked, the profiles linked but ``tiny.yaml``, which inherits the project's and draws its figures
    inside the folder (a profile's relative ``figures_dir`` is the project's), and ``runs/tiny`` a
    copy of the tiny run."""
    box = tmp_path / "box"
    (box / "params").mkdir(parents=True)
    for name in ("examples", "tests", "notebooks"):
        (box / name).symlink_to(ROOT / name)
    for profile in (ROOT / "params").glob("*.yaml"):
        if profile.name != "tiny.yaml":
            (box / "params" / profile.name).symlink_to(profile)
    (box / "params" / "tiny.yaml").write_text(f"inherit: {ROOT / 'params' / 'tiny.yaml'}\n"
                                              f"run:\n  figures_dir: {box / 'figures'}\n")
    copy_run(tiny_run, box / "runs" / "tiny")
    return box


def _written_in_the_project(code: str) -> set:
    """The project's run and figure folders of the runs a block names (a block must write none: its
    outputs go to its own folder); other tests may write other folders there meanwhile."""
    names = {"tiny"} | {Path(d).name for d in re.findall(r"--run-dir (\S+)", code)}
    return {ROOT / d / n for d in ("runs", "figures") for n in names if (ROOT / d / n).exists()}


@needs_data("sources")
@pytest.mark.pipeline
@pytest.mark.parametrize("key", sorted(TO_RUN), ids=[TO_RUN[k]["where"] for k in sorted(TO_RUN)])
def test_doc_block_runs(key, tmp_path, sandbox_source):
    block = TO_RUN[key]
    box = sandbox(tmp_path, sandbox_source)
    code = block["code"]
    for old, new in REWRITES:
        code = code.replace(old, new)
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path), "PY": sys.executable,
           "PYTHONPATH": f"{box}:{ROOT}", "MPLBACKEND": "Agg", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "SABER_DATA_DIR": str(DATA_DIR)}
    if block["kind"] == "python":                         # a file, as a plugin module is (it may read __file__)
        (box / "doc_block.py").write_text(code + "\n")
        cmd = [sys.executable, "doc_block.py"]
    else:
        script = box / "block.sh"
        script.write_text('set -eo pipefail\nsaber() { "$PY" -m saber_lib.pipeline.cli "$@"; }\n'
                          'python() { "$PY" "$@"; }\n' + code + "\n")
        cmd = ["bash", str(script)]
    before = _written_in_the_project(code)
    r = subprocess.run(cmd, cwd=box, env=env, capture_output=True, text=True, timeout=900)
    assert _written_in_the_project(code) - before == set(), f"{block['where']} wrote into the project"
    assert r.returncode == 0, f"{block['where']} failed ({r.returncode}):\n{code}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    for out in re.findall(r"--out (\S+)", code):          # what a block says it writes is there
        assert (box / out).is_dir() and any((box / out).iterdir()), f"{block['where']}: nothing in {out}"
    shutil.rmtree(box, ignore_errors=True)


# ----------------------------------------------------------------------------- the generated parts
def tables_of(markdown: str) -> list[list[dict]]:
    """The Markdown tables of a page as lists of rows (header -> cell text), ``\\|`` kept in cells."""
    tables, rows, header = [], None, None
    for line in markdown.splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if header is None:
                header, rows = cells, []
            elif not set("".join(cells)) <= set("-: "):
                rows.append(dict(zip(header, cells)))
        elif header is not None:
            tables.append(rows)
            header = None
    return tables


def _value(cell: str):
    m = re.fullmatch(r"``? ?(.*?) ?``?", cell)
    assert m, cell
    return yaml.safe_load(m.group(1))


def check_table(rows: list[dict], section: str):
    """A generated parameter table against the schema and the two profiles, read back independently."""
    paper = yaml.safe_load((ROOT / "params" / "paper.yaml").read_text())[section]
    demo = config.load_profile(ROOT / "params" / "demo.yaml").values[section]
    assert [r["key"].strip("`") for r in rows] == [f"{section}.{k}" for k in config.SCHEMA[section]], section
    for r in rows:
        key = r["key"].strip("`").split(".", 1)[1]
        typ = config.SCHEMA[section][key]
        assert _value(r["default (paper)"]) == paper[key], f"{section}.{key}"
        assert (paper[key] if r["demo"] == "same" else _value(r["demo"])) == demo[key], f"{section}.{key}"
        item = typ.item if isinstance(typ, List) else typ
        if isinstance(item, (Int, Float)):
            for bound in (item.lo, item.hi):
                assert bound is None or f"{bound:g}" in r["type"], f"{section}.{key}: {r['type']}"
        if isinstance(item, Str) and item.choices:
            assert all(f"`{c}`" in r["type"] for c in item.choices), f"{section}.{key}: {r['type']}"
        assert r["type"].startswith("list of") == isinstance(typ, List)


def test_each_stage_page_has_the_parameter_tables_of_the_schema():
    homes = {}
    for stage in STAGES:
        page = ROOT / "docs" / "stages" / f"{stage.name}.md"
        text = page.read_text()
        for marker in ("parameters", "inputs", "run-outputs"):
            assert f"<!-- saber:{marker} {stage.name} -->" in text, f"{page.name}: no {marker} marker"
        tables = [t for t in tables_of(docs_site.expand(text)) if t and "key" in t[0]]
        for t in tables:
            section = t[0]["key"].strip("`").split(".")[0]
            check_table(t, section)
            homes.setdefault(section, []).append(page.name)
    for page in (ROOT / "docs").glob("*.md"):
        for section in re.findall(r"<!-- saber:section (\w+) -->", page.read_text()):
            tables = [t for t in tables_of(docs_site.expand(f"<!-- saber:section {section} -->")) if t]
            check_table(tables[0], section)
            homes.setdefault(section, []).append(page.name)
    # every section of the schema has its table on exactly one page
    assert {s: len(p) for s, p in homes.items()} == {s: 1 for s in config.SCHEMA}


def test_a_table_that_drifts_from_the_schema_is_caught():
    rows = tables_of(docs_site.parameter_table("tournament"))[0]
    check_table(rows, "tournament")
    wrong = [dict(r) for r in rows]
    wrong[0]["default (paper)"] = "`21`"
    with pytest.raises(AssertionError):
        check_table(wrong, "tournament")
    with pytest.raises(AssertionError):
        check_table(rows[1:], "tournament")


def test_meanings_come_from_the_comments_of_paper_yaml():
    comments = docs_site.paper_comments()
    assert comments[("tournament", "bt_alpha")] == "= logistic regression with C = 1"
    assert comments[("llm", "max_failure_rate")].startswith("an LLM stage fails when more than this share")
    assert comments[("llm", "max_failure_rate")].endswith("or a prompt/parser mismatch stops the run")
    assert docs_site._comment_of(' "a # b"   # c') == "c"
    # every key of the schema says what it means (a comment after it in params/paper.yaml, or just above it)
    assert [f"{s}.{k}" for s in config.SCHEMA for k in config.SCHEMA[s] if not comments.get((s, k))] == []


def _mkdocs_yml() -> dict:
    class Loader(yaml.SafeLoader):
        pass
    Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: suffix)
    return yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=Loader)


def _nav_pages(nav) -> list[str]:
    out = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        out += _nav_pages(value) if isinstance(value, list) else [value]
    return out


def test_the_navigation_holds_every_page_stage_and_notebook():
    pages = _nav_pages(_mkdocs_yml()["nav"])
    written = sorted(str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md"))
    generated = ["notebooks/index.md"] + [f"notebooks/{s.notebook}" for s in STAGES]
    assert sorted(pages) == sorted(written + generated)
    assert [p for p in pages if p.startswith("stages/")] == [f"stages/{s.name}.md" for s in STAGES]


def test_the_cli_reference_has_every_subcommand_and_option():
    ref = docs_site.cli_reference()
    subs = docs_site.subcommands()
    assert {"run", "status", "validate", "export", "leaderboard", "judge-check", "plan", "accept"} <= set(subs)
    for sub in subs:
        assert f"## saber {sub}\n" in ref and f"usage: saber {sub}" in ref, sub
    for option in ("--params", "--run-dir", "--force", "--verify", "--published", "--fidelity", "--gpus"):
        assert option in ref


def test_the_pipeline_picture_has_every_stage_and_what_it_reads():
    edges = set(docs_site.pipeline_edges())
    assert edges == {(d, s.name) for s in STAGES for d in s.declared_inputs()}
    assert {("tournament", "evaluate"), ("released", "evaluate"), ("corpus", "topics")} <= edges
    assert docs_site.pipeline_png()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"]({docs_site.PIPELINE_PNG})" in docs_site.expand("<!-- saber:graph -->")


def test_a_runs_files_are_listed_with_their_columns(tmp_path):
    """The files of a hand-made run: one row per file, a folder of files as one row, each table's
    columns, the figures the manifest records shown; a stage the run lacks is said."""
    import json

    import polars as pl
    stage = tmp_path / "run" / "select"
    (stage / "rounds").mkdir(parents=True)
    pl.DataFrame({"query_id": ["q"], "cand_id": ["d"]}).write_parquet(stage / "benchmark.parquet")
    for i in (1, 2):
        pl.DataFrame({"round": [i]}).write_parquet(stage / "rounds" / f"r{i}.parquet")
    png = tmp_path / "fig" / "selected_candidates.png"
    png.parent.mkdir()
    png.write_bytes(b"\x89PNG\r\n\x1a\n")
    outputs = {name: {"size": (stage / name).stat().st_size}
               for name in ("benchmark.parquet", "rounds/r1.parquet", "rounds/r2.parquet")}
    (stage / "manifest.json").write_text(json.dumps({"outputs": outputs, "figure_outputs": {str(png): {}}}))
    text = docs_site.run_outputs("select", tmp_path / "run")
    rows = tables_of(text)[0]
    assert [r["file"] for r in rows] == ["`benchmark.parquet`", "`rounds/` (2 files)"]
    assert rows[0]["columns"] == "`query_id`, `cand_id`" and rows[1]["columns"] == "`round`"
    assert rows[1]["size"] == f"{outputs['rounds/r1.parquet']['size'] * 2:,} B"
    assert "![selected_candidates](../run-figures/select/selected_candidates.png)" in text
    assert "no finished `topics` stage" in docs_site.run_outputs("topics", tmp_path / "run")


def test_every_run_command_of_a_tested_block_names_its_run_folder():
    # without --run-dir a run goes to the project's runs/<profile>, outside the block's sandbox; the
    # check after the block sees that only when the folder was not there before, so it is made here
    bare = [f"{b['where']}: {line.strip()}" for b in TO_RUN.values() if b["kind"] != "python"
            for line in b["code"].replace("\\\n", " ").splitlines()
            if re.search(r"\bsaber run\b", line) and "--run-dir" not in line]
    assert bare == []
