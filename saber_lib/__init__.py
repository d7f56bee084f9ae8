"""SABER-Math workbench library: every stage of the benchmark's construction and evaluation.

Stages are run by ``saber run`` (``saber_lib.pipeline.runner``) as papermill notebooks; the notebooks call
the modules here. See CONTRIBUTING.md for the layout and the artifact contracts.
"""
import importlib

__version__ = "0.1.0"

# entry points named at the package's top, resolved on first use so that importing saber_lib (every
# command does) loads nothing more: name -> the module that defines it (docs/public_api.md)
ENTRY_POINTS = {"evaluate_retriever": "saber_lib.evaluate.stage"}


def __getattr__(name):
    if name in ENTRY_POINTS:
        return getattr(importlib.import_module(ENTRY_POINTS[name]), name)
    raise AttributeError(f"module 'saber_lib' has no attribute {name!r}")
