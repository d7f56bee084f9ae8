"""The paper's sizes that the paper-scale rehearsal scales, in one place for every stage module
(``paper_scale_stages``, ``paper_scale_topics``, ``paper_scale_select``) and for the fits of
``bench_paper_scale``: the counts scale with ``scale``, the shapes (candidates, rounds, systems,
resamples, settings) stay the paper's."""
from __future__ import annotations

PAPER = {"problems": 283_000, "queries": 1000, "candidates": 150, "rounds": 20, "systems": 50,
         "resamples": 10_000, "settings": 3}


def n_problems(scale: float) -> int:
    """Problems of a corpus at ``scale`` (at least 100)."""
    return max(100, round(PAPER["problems"] * scale))


def n_queries(scale: float) -> int:
    """Benchmark queries at ``scale`` (at least 1)."""
    return max(1, round(PAPER["queries"] * scale))


def profile_ontology(o: dict):
    """The rehearsal's profile and the MathWorld tree it names (``ontology.ontology_file`` in the
    data directory ``o["data_dir"]``, else the default one)."""
    from saber_lib.core.config import load_profile
    from saber_lib.core.data import data_file
    from saber_lib.ontology.tree import load_ontology

    prof = load_profile(o["profile"])
    return prof, load_ontology(data_file(o.get("data_dir"), prof.section("ontology")["ontology_file"]))
