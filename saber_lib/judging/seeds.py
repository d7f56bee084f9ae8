"""Stable seeds: a hash of ids that does not change between processes, and the generator of one
query's tournament round (so a resumed run draws the same pairs)."""
from __future__ import annotations

import hashlib

import numpy as np


def stable_int(*parts) -> int:
    """A 63-bit integer from the sha256 of the parts (stable across processes, unlike hash())."""
    h = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(h[:8], "little") >> 1


def round_rng(seed: int, query_id: str, r: int, stream: int = 0) -> np.random.Generator:
    """The generator of one query's round: the same pairs whether or not the run was resumed."""
    return np.random.default_rng([seed, stable_int(query_id), r, stream])
