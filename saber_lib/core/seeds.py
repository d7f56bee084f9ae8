"""The one seed helper: random streams keyed by names, stable across processes and machines.

``rng_for(seed, *keys)`` is ``numpy.random.default_rng([seed, k_1, k_2, ...])`` where an integer
key enters as it is and any other key as :func:`stable_int` of its text (a sha256, unlike
``hash()`` not salted per process). So a stream depends only on the seed and its names: adding a
query, a system or a round changes no other stream.
"""
from __future__ import annotations

import hashlib

import numpy as np


def stable_int(*parts) -> int:
    """A 63-bit integer from the sha256 of the parts joined by ``\\x1f`` (stable across processes)."""
    h = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(h[:8], "little") >> 1


def _key(k) -> int:
    if isinstance(k, (int, np.integer)) and not isinstance(k, bool):
        if k < 0:
            raise ValueError(f"an integer seed key must be >= 0, got {k}")
        return int(k)
    return stable_int(k)


def rng_for(seed: int, *keys) -> np.random.Generator:
    """The generator of the stream named by ``keys`` under ``seed`` (module docstring)."""
    return np.random.default_rng([_key(int(seed)), *[_key(k) for k in keys]])
