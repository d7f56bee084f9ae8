"""Stable seeds of the tournament: the generator of one query's round (so a resumed run draws the
same pairs). The seed helper itself is :mod:`saber_lib.core.seeds`."""
from __future__ import annotations

import numpy as np

from ..core.seeds import rng_for, stable_int  # noqa: F401  (re-exported)


def round_rng(seed: int, query_id: str, r: int, stream: int = 0) -> np.random.Generator:
    """The generator of one query's round: the same pairs whether or not the run was resumed."""
    return rng_for(seed, str(query_id), int(r), int(stream))
