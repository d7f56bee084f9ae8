"""Parameters that name a file or a folder, hashed as inputs of the stages that take their section.

A key is declared path-valued in the profile schema (``saber_lib/config.py``) by the ``path`` of its
``Str`` type: ``Str(path="data")`` for a path relative to the data directory, ``Str(path="project")``
for one relative to the project root (where notebooks run); an absolute path stays as it is. Every
stage whose sections hold such a key gets ``input:<section>.<key>`` among its input hashes: the
file's sha256, or for a folder the sha256 of the sorted list of its files' relative paths and hashes
(a missing path hashes as None; a null or empty value is no input). An edit of the file therefore makes the
stage stale, and ``saber status`` names the key and the path.
"""
from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from pathlib import Path

from ..core import plugins
from ..core.config import SCHEMA
from ..core.data import PROJECT_ROOT, hash_file, resolve_data_dir

PREFIX = "input:"
PLUGIN_PREFIX = "plugin:"
NAME_SEPARATORS = re.compile(r"[>@+:\s]+")   # a system or judge spec joins names: bm25>mine, blend:a+b
BASES = ("data", "project")


def path_keys(sections) -> list[tuple[str, str]]:
    """``(section, key)`` of every path-valued key (``Str(path=...)``) of ``sections``, in schema order."""
    return [(sec, key) for sec in sections for key, typ in SCHEMA.get(sec, {}).items()
            if getattr(typ, "path", None)]


def resolve(values: dict, sec: str, key: str) -> Path | None:
    """The path ``values[sec][key]`` names (None when the value is null)."""
    v = values[sec][key]
    if v is None or not str(v).strip():   # null or empty: no file
        return None
    p = Path(v).expanduser()
    if p.is_absolute():
        return p
    base = SCHEMA[sec][key].path
    if base == "data":
        return resolve_data_dir(values["run"]["data_dir"]) / p
    if base == "project":
        return PROJECT_ROOT / p
    raise ValueError(f"{sec}.{key}: path base {base!r} is not one of {BASES}")


def hash_path(path: Path, file_hash: Callable[[Path], str] = hash_file) -> str | None:
    """sha256 of a regular file; of a folder, sha256 over (relative path, sha256) of its regular files
    in sorted order; None for a missing path (or one that is neither)."""
    if path.is_file():
        return file_hash(path)
    if not path.is_dir():
        return None
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        if p.is_file():  # regular files only (a FIFO would block the read)
            h.update(p.relative_to(path).as_posix().encode() + b"\0")
            h.update(file_hash(p).encode() + b"\n")
    return h.hexdigest()


def path_input_hashes(values: dict, sections, file_hash: Callable[[Path], str] = hash_file) -> dict[str, str | None]:
    """``{"input:<section>.<key>": hash}`` for every path-valued key of ``sections`` that is set."""
    out = {}
    for sec, key in path_keys(sections):
        path = resolve(values, sec, key)
        if path is not None:
            out[f"{PREFIX}{sec}.{key}"] = hash_path(path, file_hash)
    return out


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def plugin_input_hashes(values: dict, sections, file_hash: Callable[[Path], str] = hash_file) -> dict[str, str | None]:
    """For every plugin (a module of ``run.plugins`` or of an installed entry point) that registered
    a name used by a value of ``sections`` (a retriever in ``evaluate.retrievers``, the reranker of
    ``bm25>mine``, a judge kind, a corpus source): ``{"plugin:<module>": hash of its file}`` and
    ``{"plugin:<module>:<file>": hash}`` for every other file of plugin code it loaded
    (``core.plugins.plugin_files``: its package's files, the helper modules it imported). The
    plugins must be loaded (``runner.load_run_profile``)."""
    used = {part for s in _strings({sec: values.get(sec) for sec in sections})
            for part in [s, *NAME_SEPARATORS.split(s)] if part}
    out = {}
    for module in plugins.loaded_plugins(values["run"].get("plugins")):
        if plugins.registered_names(module) & used:
            path = plugins.module_file(module)
            out[f"{PLUGIN_PREFIX}{module}"] = hash_path(Path(path), file_hash) if path else None
            for other in plugins.plugin_files(module):
                if other != path:
                    out[f"{PLUGIN_PREFIX}{module}:{other}"] = hash_path(Path(other), file_hash)
    return out


def changed_reason(name: str, values: dict) -> str | None:
    """``input <section>.<key> = <path> changed`` for an input hash key of this module, ``plugin
    <module> (<file>) changed`` for a plugin's file (else None)."""
    if name.startswith(PLUGIN_PREFIX):
        module, _, path = name[len(PLUGIN_PREFIX):].partition(":")
        return f"plugin {module} ({path or plugins.module_file(module)}) changed"
    if not name.startswith(PREFIX):
        return None
    sec, _, key = name[len(PREFIX):].partition(".")
    path = resolve(values, sec, key) if key in SCHEMA.get(sec, {}) else None
    return f"input {sec}.{key} = {path} changed"
