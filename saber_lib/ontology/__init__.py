"""The MathWorld ontology (paper 3.2.1; the ``ontology`` stage): the DAG of topics expanded into a
tree (:mod:`.tree`) and the stage's tables and figure (:mod:`.stage`).

May import: ``core``. Public API (docs/public_api.md), importable from here: ``load_ontology``.
"""
from .tree import Ontology, OntologyError, load_ontology, ontology_from_nodes  # noqa: F401
