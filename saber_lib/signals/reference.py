"""Reference all-pairs signals by a plain double loop (small N: tests and benchmarks check the
tiled kernel of :mod:`saber_lib.signals.pairs` against it)."""
from __future__ import annotations

import numpy as np

from .summary import jaccard
from .topic import bma


def brute_force_pairs(token_sets, topic_sets, lin, jaccard_empty: float = 0.0):
    """Reference double loop: ``(topic, summ)`` N x N float64 (diagonal included)."""
    lin = np.asarray(lin, dtype=np.float64)
    n = len(token_sets)
    topic = np.zeros((n, n))
    summ = np.zeros((n, n))
    for i in range(n):
        xi = np.asarray(sorted(set(topic_sets[i])), dtype=np.int64)
        for j in range(n):
            yj = np.asarray(sorted(set(topic_sets[j])), dtype=np.int64)
            topic[i, j] = bma(lin[np.ix_(xi, yj)]) if len(xi) and len(yj) else 0.0
            summ[i, j] = jaccard(token_sets[i], token_sets[j], empty=jaccard_empty)
    return topic, summ
