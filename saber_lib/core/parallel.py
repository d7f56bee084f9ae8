"""Executors of embarrassingly parallel loops: each runs ``fn(shared, task)`` for every task and
yields the results in task order, so that the caller's output does not depend on the executor.

* :class:`SerialExecutor`: in this process (tests, debugging).
* :class:`LocalProcessExecutor`: a local process pool; the shared inputs reach each worker once.
* :class:`DaskExecutor`: a Dask cluster (``dask[distributed]``, the ``dask`` extra): an existing
  scheduler (``run.dask_scheduler: tcp://host:8786``) or a ``LocalCluster`` started for the run
  (``run.dask_scheduler: null``, ``run.dask_workers`` processes). The shared inputs are scattered
  once to every worker; tasks are submitted as futures (a bounded window of them) and collected
  with ``as_completed``. A worker lost mid-run costs only the tasks it was running or holding:
  the scheduler re-runs those elsewhere (``distributed.scheduler.allowed-failures`` times).

:func:`make_executor` builds one from the profile's ``run`` keys (``executor``, ``dask_scheduler``,
``dask_workers``, ``threads``). Every executor is a context manager (``close`` stops a cluster it
started).
"""
from __future__ import annotations

import logging
import multiprocessing as mp
import os
import uuid
from concurrent.futures import ProcessPoolExecutor
from typing import Callable, Iterator, Protocol, Sequence


class Executor(Protocol):
    """Runs ``fn(shared, task)`` for every task and yields the results in task order."""

    workers: int

    def map(self, fn: Callable, tasks: Sequence, shared) -> Iterator: ...


class _Closing:
    def close(self) -> None:
        """Nothing to release."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class SerialExecutor(_Closing):
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


class LocalProcessExecutor(_Closing):
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


def _peak_rss_mb() -> float:
    """Peak resident set size of this process, MiB (Linux: ru_maxrss in KiB)."""
    import resource  # Unix only; runs on a Dask worker

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _cpu_s() -> float:
    import resource  # Unix only; runs on a Dask worker

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class DaskExecutor(_Closing):
    """Tasks as Dask futures on a cluster: ``scheduler`` (an address) or a ``LocalCluster`` of
    ``n_workers`` single-threaded worker processes started on first use (0: all cores).

    ``window`` bounds the tasks submitted and not yet yielded (default 4 per worker thread), so
    results stream to the caller with bounded memory on the client and the workers.
    """

    def __init__(self, scheduler: str | None = None, n_workers: int = 0, *, window: int = 0,
                 threads_per_worker: int = 1, client=None):
        self.scheduler = scheduler
        self.n_workers = n_workers or os.cpu_count() or 1
        self.threads_per_worker = threads_per_worker
        self.window = window
        self._client = client
        self._cluster = None
        self._own_client = client is None

    @property
    def client(self):
        if self._client is None:
            import dask  # optional: the `dask` extra
            from distributed import Client, LocalCluster  # optional: the `dask` extra

            if self.scheduler:
                self._client = Client(self.scheduler)
            else:
                # one malloc arena per worker process: a task thread's own arena gives its emptied
                # heaps back to the system, so every large tile buffer was faulted in again (system
                # CPU that grew with the machine's load). The nanny puts it in the environment the
                # worker process starts with (what malloc reads); like Dask's own
                # MALLOC_TRIM_THRESHOLD_, it is left in this process's environment too.
                with dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_ARENA_MAX": 1}):
                    self._cluster = LocalCluster(n_workers=self.n_workers, threads_per_worker=self.threads_per_worker,
                                                 processes=True, host="127.0.0.1", dashboard_address="127.0.0.1:0",
                                                 silence_logs=logging.WARNING)
                self._client = Client(self._cluster)
            self._client.wait_for_workers(1)
        return self._client

    @property
    def workers(self) -> int:
        """Worker threads in the cluster now (what the tile plan divides the memory budget by)."""
        info = self.client.scheduler_info(n_workers=-1)["workers"]
        return max(1, sum(w.get("nthreads", 1) for w in info.values()))

    def map(self, fn, tasks, shared):
        from distributed import as_completed  # optional: the `dask` extra

        client = self.client
        tasks = list(tasks)
        if not tasks:
            return
        shared_f = client.scatter([shared], broadcast=True, hash=False)[0]
        window = self.window or 4 * self.workers
        prefix = f"{getattr(fn, '__name__', 'task')}-{uuid.uuid4().hex[:8]}"
        index: dict = {}
        pending = iter(enumerate(tasks))
        done: dict[int, object] = {}
        ac = as_completed()
        nxt = 0

        def refill():
            while len(index) + len(done) < window:
                try:
                    i, t = next(pending)
                except StopIteration:
                    return
                f = client.submit(fn, shared_f, t, key=f"{prefix}-{i}", pure=False)
                index[f.key] = (i, f)
                ac.add(f)

        try:
            refill()
            for f in ac:
                i, _ = index.pop(f.key)
                done[i] = f.result()   # raises the task's exception here
                f.release()
                while nxt in done:
                    yield done.pop(nxt)
                    nxt += 1
                refill()
        finally:
            for _, f in index.values():
                f.cancel()
            shared_f.release()

    def worker_stats(self) -> dict:
        """Per worker address: peak RSS (MiB) and CPU seconds of its process so far."""
        peak = self.client.run(_peak_rss_mb)
        cpu = self.client.run(_cpu_s)
        return {w: {"peak_rss_mb": peak[w], "cpu_s": cpu.get(w)} for w in peak}

    def close(self) -> None:
        if self._client is not None and self._own_client:
            self._client.close()
        if self._cluster is not None:
            self._cluster.close()
        self._client = self._cluster = None


def make_executor(executor: str = "local", workers: int = 0, dask_scheduler: str | None = None,
                  dask_workers: int = 0):
    """The executor the profile names: ``local`` (a process pool of ``workers``, 0 = all cores) or
    ``dask`` (``dask_scheduler`` address, or a ``LocalCluster`` of ``dask_workers`` processes)."""
    if executor == "local":
        return LocalProcessExecutor(workers)
    if executor == "dask":
        return DaskExecutor(dask_scheduler, dask_workers or workers)
    raise ValueError(f"run.executor: unknown executor {executor!r} (local, dask)")
