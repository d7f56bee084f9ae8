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
names a plugin registered is kept (:func:`registered_names`: the names registered while it was
imported, by it, its submodules or the modules it imported), and which code it loaded
(:func:`plugin_files`: its file, or every ``.py`` file of its package; the modules it imported that
are neither the workbench's nor the standard library's nor installed packages' (modules of its own
distribution included)), so a stage whose parameters use one of the names hashes those files as
inputs (``pipeline/path_inputs.py``).
May import: nothing of ``saber_lib`` above ``core``.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import sys
import sysconfig
from pathlib import Path

ENV = "SABER_PLUGINS"
GROUPS = ("saber.retrievers", "saber.judges")

_LOADED: dict[str, str] = {}           # module -> its file
_FILES: dict[str, list[str]] = {}      # module -> every file of plugin code it loaded (plugin_files)
_NAMES: dict[str, set[str]] = {}       # module -> names it registered
_IMPORTING: list[str] = []             # the plugins being imported now (their registrations are theirs)
_CLAIMED: set[str] = set()             # modules whose import a plugin's import brought (each counted once)
_ENTRY_POINTS_DONE: list[bool] = [False]
_ENTRY_MODULES: list[str] = []         # the modules the installed entry points named, in load order
LIBRARY = Path(__file__).resolve().parent.parent      # saber_lib


class PluginError(ImportError):
    """A plugin module that cannot be imported, or whose registration clashes with another one."""


def note_registration(module: str, name: str) -> None:
    """Called by the registries: ``module`` registered ``name`` (a retriever, judge kind or source);
    the name is also the plugin's whose import is running (a submodule or helper registering it; of
    plugins imported one inside another, the innermost)."""
    for owner in {module, *_IMPORTING[-1:]}:
        _NAMES.setdefault(owner, set()).add(name)


def registered_names(module: str) -> set[str]:
    """The names ``module`` registered (empty when it registered none)."""
    return set(_NAMES.get(module, ()))


def _import(module: str, origin: str):
    """Import a plugin module, noting the plugin code it loaded (:func:`plugin_files`)."""
    before = set(sys.modules)
    _IMPORTING.append(module)
    try:
        mod = importlib.import_module(module)
    except PluginError:
        raise
    except Exception as e:  # a plugin's own error of any kind: one line naming the module
        cause = f"{type(e).__name__}: {e}"
        raise PluginError(f"plugin {module!r} ({origin}) failed to import: {cause}") from e
    finally:
        _IMPORTING.remove(module)
    if module not in _FILES:
        top = module.split(".")[0]
        new = [m for m in sorted(set(sys.modules) - before - _CLAIMED) if m in sys.modules]   # not a nested plugin's
        _CLAIMED.update(new)
        _FILES[module] = sorted({*_own_files(mod), *(str(f) for m in new for f in [_file_of(sys.modules[m])]
                                                     if f and (m.split(".")[0] == top or _user_code(f)))})
    return mod


def _file_of(mod) -> Path | None:
    f = getattr(mod, "__file__", None)
    return Path(f).resolve() if f and str(f).endswith(".py") else None


def _own_files(mod) -> list[str]:
    """The module's file, or every ``.py`` file under its package's folder (submodules imported later too)."""
    paths = getattr(mod, "__path__", None)
    if paths:
        return [str(p.resolve()) for d in paths for p in Path(d).rglob("*.py") if "__pycache__" not in p.parts]
    f = _file_of(mod)
    return [str(f)] if f else []


def _user_code(path: Path) -> bool:
    """Whether a module file is the user's code: not the workbench's, the standard library's or an
    installed package's."""
    roots = [LIBRARY, *(Path(p).resolve() for k in ("stdlib", "platstdlib", "purelib", "platlib")
                        for p in [sysconfig.get_paths().get(k)] if p)]
    return not any(path.is_relative_to(r) for r in roots) and "site-packages" not in path.parts \
        and "dist-packages" not in path.parts


def plugin_files(module: str) -> list[str]:
    """Every file of plugin code ``module`` loaded (module docstring), sorted; [] when not loaded."""
    return list(_FILES.get(module, ()))


def loaded_plugins(modules=()) -> list[str]:
    """``modules`` (``run.plugins``) and then the modules of the installed entry points loaded."""
    return list(dict.fromkeys([*(modules or ()), *_ENTRY_MODULES]))


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
            mod = _import(ep.module, f"entry point {ep.name!r} of {group}")
            _LOADED.setdefault(ep.module, str(Path(getattr(mod, "__file__", "") or ep.module).resolve()))
            done.append(ep.module)
            if ep.module not in _ENTRY_MODULES:
                _ENTRY_MODULES.append(ep.module)
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
