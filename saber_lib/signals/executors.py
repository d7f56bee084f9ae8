"""Executors of the all-pairs tasks (:mod:`saber_lib.signals.pairs`): each runs ``fn(shared, task)``
for every task and yields the results in task order. They live in :mod:`saber_lib.core.parallel` (layer
0, so that the corpus and embedding loops can use them too); re-exported here.
"""
from __future__ import annotations

from ..core.parallel import DaskExecutor, Executor, LocalProcessExecutor, SerialExecutor, make_executor
