"""The source files a stage executes, hashed as its inputs: its notebook and the library code the
notebook imports.

The library part is per stage: the ``saber_lib`` modules named by the notebook's import statements,
followed transitively through the imports of those modules (``import``/``from ... import`` anywhere
in a module, function-level ones included, relative ones resolved), each with the ``__init__.py``
of its packages and the data files (prompt templates, ...) that sit beside the package's modules.
Editing ``saber_lib/evaluate/tables.py`` thus makes the stages that import it stale, not the corpus stage.
A module loaded by a name built at run time is not seen; the encoders and LLM backends load
third-party packages that way, whose versions the manifest records. The one exception is a registry
that imports every module of its package (:data:`REGISTRY_PACKAGES`): importing it counts as
importing them all.
"""
from __future__ import annotations

import ast
import json
from pathlib import Path

from ..core.data import PROJECT_ROOT, hash_file

LIB_NAME = "saber_lib"
LIB_DIR = PROJECT_ROOT / LIB_NAME   # tests point this at a copy

_parsed: dict[tuple[str, int, int], tuple[str, ...]] = {}

# registry module -> the package whose every module it imports at run time (each registers itself)
REGISTRY_PACKAGES = {f"{LIB_NAME}.retrieval.registry": f"{LIB_NAME}.retrieval"}


def _imports(tree: ast.AST, package: str) -> set[str]:
    """Dotted module names an AST imports (``from a import b`` gives ``a`` and ``a.b``); relative
    imports resolved against ``package`` (the dotted package holding the module)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
                base = ".".join([*parts, *([base] if base else [])])
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names if a.name != "*")
    return {m for m in out if m == LIB_NAME or m.startswith(LIB_NAME + ".")}


def _module_file(name: str) -> Path | None:
    rel = name.split(".")[1:]
    p = LIB_DIR.joinpath(*rel)
    if (p / "__init__.py").is_file():
        return p / "__init__.py"
    f = p.with_suffix(".py") if rel else LIB_DIR / "__init__.py"
    return f if f.is_file() else None


def _parse(path: Path, package: str) -> tuple[str, ...]:
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _parsed:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            tree = ast.Module(body=[], type_ignores=[])  # its hash still covers it
        _parsed[key] = tuple(sorted(_imports(tree, package)))
    return _parsed[key]


def notebook_imports(notebook: Path) -> set[str]:
    """The ``saber_lib`` modules a notebook's code cells import."""
    nb = json.loads(Path(notebook).read_text(encoding="utf-8"))
    out: set[str] = set()
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        src = "".join(cell.get("source", ""))
        src = "\n".join(ln for ln in src.splitlines() if not ln.lstrip().startswith(("%", "!")))
        try:
            out |= _imports(ast.parse(src), LIB_NAME)
        except SyntaxError:
            continue
    return out


def library_files(modules) -> list[Path]:
    """The source files of ``modules`` and of everything they import in ``saber_lib``, with the
    packages' ``__init__.py`` and data files, sorted."""
    files: set[Path] = set()
    seen: set[str] = set()
    todo = list(modules)
    while todo:
        name = todo.pop()
        parts = name.split(".")
        todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))  # its packages run first
        if name in seen:
            continue
        seen.add(name)
        f = _module_file(name)
        if f is None:
            continue  # a name imported from a module (``from a import function``)
        files.add(f)
        if f.name == "__init__.py":
            files.update(p for p in f.parent.iterdir()
                         if p.is_file() and p.suffix not in (".py", ".pyc") and not p.name.startswith("."))
        package = name if f.name == "__init__.py" else name.rpartition(".")[0]
        todo.extend(_parse(f, package))
        if name in REGISTRY_PACKAGES:
            folder = f.parent
            todo.extend(f"{REGISTRY_PACKAGES[name]}.{p.stem}" for p in folder.glob("*.py") if not p.name.startswith("_"))
    return sorted(files)


def source_hashes(notebook: Path) -> dict[str, str | None]:
    """``{"notebook:<file>": sha256, "code:saber_lib/<module path>": sha256, ...}``: the notebook's
    bytes and those of every library file it runs (so ``saber status`` can name the file that
    changed). A missing notebook hashes as None."""
    notebook = Path(notebook)
    if not notebook.is_file():
        return {f"notebook:{notebook.name}": None}
    out = {f"notebook:{notebook.name}": hash_file(notebook)}
    for f in library_files(notebook_imports(notebook)):
        out[f"code:{LIB_NAME}/{f.relative_to(LIB_DIR).as_posix()}"] = hash_file(f)
    return out
