"""Executors of the all-pairs tasks (:mod:`saber_lib.signals.pairs`): each runs ``fn(shared, task)``
for every task and yields the results in task order; a Dask or Ray executor only needs ``map``.
"""
from __future__ import annotations

import multiprocessing as mp
import os
from concurrent.futures import ProcessPoolExecutor
from typing import Callable, Iterator, Protocol, Sequence


class Executor(Protocol):
    """Runs ``fn(shared, task)`` for every task and yields the results in task order."""

    def map(self, fn: Callable, tasks: Sequence, shared) -> Iterator: ...


class SerialExecutor:
    """Runs the tasks in this process (tests, debugging)."""

    workers = 1

    def map(self, fn, tasks, shared):
        for t in tasks:
            yield fn(shared, t)


_SHARED = None


def _init_worker(shared):
    global _SHARED
    _SHARED = shared
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")


def _call_shared(args):
    fn, task = args
    return fn(_SHARED, task)


class LocalProcessExecutor:
    """A local process pool; the shared inputs reach each worker once (fork: without a copy)."""

    def __init__(self, workers: int = 0):
        self.workers = workers or os.cpu_count() or 1

    def map(self, fn, tasks, shared):
        if self.workers <= 1 or len(tasks) <= 1:
            yield from SerialExecutor().map(fn, tasks, shared)
            return
        method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
        with ProcessPoolExecutor(self.workers, mp_context=mp.get_context(method),
                                 initializer=_init_worker, initargs=(shared,)) as ex:
            yield from ex.map(_call_shared, [(fn, t) for t in tasks])
