"""SABER-Math workbench library: every stage of the benchmark's construction and evaluation.

Stages are run by ``saber run`` (``saber_lib.pipeline.runner``) as papermill notebooks; the notebooks call
the modules here. See CONTRIBUTING.md for the layout and the artifact contracts.
"""
__version__ = "0.1.0"
