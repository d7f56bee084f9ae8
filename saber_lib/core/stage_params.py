"""A stage's parameters as one typed object (:class:`StageParams`): the schema keys of the stage's
sections and the run keys the runner injects, checked against the schema, so that library functions
taking many of them read these and nothing else of a notebook's namespace."""
from __future__ import annotations

from typing import Mapping

from .config import DICT_SECTIONS, SCHEMA
from .config_types import ProfileError

# the run keys the runner injects into every stage notebook (PARALLEL_PARAMETERS: a parallel stage's too)
RUN_PARAMETERS = ("run_dir", "run_name", "seed", "data_dir", "cache_dir", "figures_dir", "threads")
PARALLEL_PARAMETERS = ("executor", "dask_scheduler", "dask_workers")


class StageParams(Mapping):
    """A stage's parameters as the library reads them: exactly the schema keys of the stage's sections
    (a dict section such as ``llm`` as one dict) and the run keys, each value checked against the
    schema (:meth:`of`). Asking for any other name is a ``KeyError`` naming the sections, so a library
    function never reads a notebook's other variables."""

    def __init__(self, values: dict, sections: tuple):
        self._values, self.sections = dict(values), tuple(sections)

    @classmethod
    def of(cls, sections, namespace: Mapping, parallel: bool = False) -> "StageParams":
        """The parameters of ``sections`` taken from ``namespace`` (a notebook's injected variables)."""
        values = {}
        for sec in sections:
            if sec in DICT_SECTIONS:
                values[sec] = dict(namespace[sec])
                continue
            for key, typ in SCHEMA[sec].items():
                err = typ.check(namespace[key])
                if err:
                    raise ProfileError(f"parameter {key} ({sec}.{key}): {err}")
                values[key] = namespace[key]
        for key in RUN_PARAMETERS + (PARALLEL_PARAMETERS if parallel else ()):
            values[key] = namespace[key]
        return cls(values, tuple(sections))

    def __getitem__(self, key):
        if key not in self._values:
            raise KeyError(f"{key!r} is not a parameter of the sections {', '.join(self.sections)} or of the run")
        return self._values[key]

    def __iter__(self):
        return iter(self._values)

    def __len__(self):
        return len(self._values)
