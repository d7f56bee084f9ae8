"""A user's own retrievers, judges and corpus sources, loaded from Python modules.

Two ways in, both only *import* modules (a module registers what it defines with the registry
decorators: ``saber_lib.retrieval.register_retriever``, ``saber_lib.judging.register_judge``,
``saber_lib.corpus.loaders.register``):

* the profile key ``run.plugins: [module, ...]``: dotted module names, importable from the
  working directory (the folder ``saber`` was started in; the runner passes it and the modules to
  every stage's kernel in the environment variable :data:`ENV`, so the stage's notebook loads the
  same plugins);
* the entry-point groups :data:`GROUPS` of installed distributions (``[project.entry-points.
  "saber.retrievers"]`` in a plugin package's ``pyproject.toml``), loaded once per process.

A module that fails to import is one :class:`PluginError` naming the module and the cause. Which
names a plugin module registered is kept (:func:`registered_names`), so a stage whose parameters
use one of them hashes the module's file as an input (``pipeline/path_inputs.py``).
May import: nothing of ``saber_lib`` above ``core``.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import sys
from pathlib import Path

ENV = "SABER_PLUGINS"
GROUPS = ("saber.retrievers", "saber.judges")

_LOADED: dict[str, str] = {}           # module -> its file
_NAMES: dict[str, set[str]] = {}       # module -> names it registered
_ENTRY_POINTS_DONE: list[bool] = [False]


class PluginError(ImportError):
    """A plugin module that cannot be imported, or whose registration clashes with another one."""


def note_registration(module: str, name: str) -> None:
    """Called by the registries: ``module`` registered ``name`` (a retriever, judge kind or source)."""
    _NAMES.setdefault(module, set()).add(name)


def registered_names(module: str) -> set[str]:
    """The names ``module`` registered (empty when it registered none)."""
    return set(_NAMES.get(module, ()))


def _import(module: str, origin: str):
    try:
        return importlib.import_module(module)
    except PluginError:
        raise
    except Exception as e:  # a plugin's own error of any kind: one line naming the module
        cause = f"{type(e).__name__}: {e}"
        raise PluginError(f"plugin {module!r} ({origin}) failed to import: {cause}") from e


def load_plugins(modules, *, search_path: str | os.PathLike | None = None, origin: str = "run.plugins") -> list[str]:
    """Import every module of ``modules`` (dotted names), with ``search_path`` (default: the
    working directory) first on ``sys.path``; returns the files of the modules. ``origin`` names
    where the list came from in errors."""
    folder = str(Path(search_path or os.getcwd()).resolve())
    if folder not in sys.path:
        sys.path.insert(0, folder)
    files = []
    for module in modules or ():
        if not isinstance(module, str) or not module.strip():
            raise PluginError(f"{origin}: {module!r} is not a module name")
        if module not in _LOADED:
            mod = _import(module, origin)
            _LOADED[module] = str(Path(getattr(mod, "__file__", "") or module).resolve())
        files.append(_LOADED[module])
    return files


def module_file(module: str) -> str | None:
    """The file of a loaded plugin module (None when it was not loaded)."""
    return _LOADED.get(module)


def load_entry_points(groups=GROUPS) -> list[str]:
    """Import the modules of every installed entry point of ``groups`` (once per process)."""
    if _ENTRY_POINTS_DONE[0]:
        return []
    _ENTRY_POINTS_DONE[0] = True
    done = []
    for group in groups:
        for ep in importlib.metadata.entry_points(group=group):
            _import(ep.module, f"entry point {ep.name!r} of {group}")
            done.append(ep.module)
    return done


def environment(modules, search_path=None) -> str:
    """The value of :data:`ENV` that hands ``modules`` (and where to import them from) to a kernel."""
    return json.dumps({"modules": list(modules or ()), "path": str(Path(search_path or os.getcwd()).resolve())})


def load_from_environment() -> list[str]:
    """Load the plugins :data:`ENV` names (set by the runner for a stage's kernel), and the
    installed entry points. Returns the plugin files."""
    load_entry_points()
    raw = os.environ.get(ENV)
    if not raw:
        return []
    spec = json.loads(raw)
    return load_plugins(spec.get("modules", []), search_path=spec.get("path"), origin=f"${ENV}")
