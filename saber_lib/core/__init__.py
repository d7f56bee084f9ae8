"""The services every stage shares: the parameter profile (schema :mod:`.config`, value types
:mod:`.config_types`, YAML reading :mod:`.config_yaml`), files and hashing (:mod:`.data`), executors
of parallel loops (:mod:`.parallel`), document texts and tokens (:mod:`.text`) and the one seed helper
(:mod:`.seeds`), and the loader of a user's plugin modules (:mod:`.plugins`).

May import: nothing of ``saber_lib`` outside this package. Public API (docs/public_api.md),
importable from here: ``load_plugins``.
"""
from .plugins import load_plugins  # noqa: F401
