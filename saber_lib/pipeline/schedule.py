"""Run the stages of a DAG, up to ``jobs`` at a time: a stage starts once every stage it reads from
has finished (ties in the given order, which is a valid sequential order).

``prepare(name)`` runs in the calling thread when the stage's inputs are done and says whether it
must execute (``False``: up to date, skipped); ``execute(name)`` runs in a worker thread (each stage
its own kernel process). With ``jobs=1`` this is the sequential run: one stage after another in the
given order, stopping at the first failure. With more, after a failure the stages already running
finish, nothing that reads (directly or not) from the failed stage starts, the other stages go on,
and the first failure is raised at the end (:class:`StagesFailed` when several failed or something
was left out because of one).
"""
from __future__ import annotations

import os
import queue
import threading
from typing import Callable


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:   # not on Linux
        return max(1, os.cpu_count() or 1)


def kernel_threads(jobs: int) -> dict:
    """What a stage's kernel is told when up to ``jobs`` stages run at once (nothing for one job): its
    threads wait passively (``OMP_WAIT_POLICY``; ONNX Runtime sessions stop spinning too), so stages that
    overlap do not burn a core spinning for each other. Thread counts are left as with one job (every
    core, or ``run.threads``): a stage that runs alone, as the heaviest ones mostly do, keeps every core,
    and a torch encoder's vector can differ in its last bits with the thread count, so the count must
    not depend on which stages happened to overlap. The user's own setting wins."""
    if jobs <= 1 or "OMP_WAIT_POLICY" in os.environ:
        return {}
    return {"OMP_WAIT_POLICY": "PASSIVE"}


class StagesFailed(RuntimeError):
    """Several stages failed, or stages were left out because a stage they read from failed."""

    def __init__(self, failures: dict[str, BaseException], left_out: list[str]):
        self.failures, self.left_out = failures, left_out
        lines = [str(e) for e in failures.values()]
        if left_out:
            lines.append(f"not run because a stage they read from failed: {', '.join(left_out)}")
        super().__init__("\n".join(lines))


def run_dag(order: list[str], deps: dict[str, tuple[str, ...]], jobs: int,
            prepare: Callable[[str], bool], execute: Callable[[str], None],
            after: dict[str, tuple[str, ...]] | None = None) -> dict[str, str]:
    """Run ``order``'s stages; returns ``{stage: "ran" | "skipped"}``. ``deps[name]``: the stages of
    ``order`` it reads from; ``after[name]``: stages of ``order`` that must have ended (done, failed or
    left out) before it starts, without reading from them (a failure there does not stop it). Both
    point to stages earlier in ``order``."""
    after = after or {}
    jobs = max(1, int(jobs))
    pending = list(order)
    result: dict[str, str] = {}
    failures: dict[str, BaseException] = {}
    blocked: list[str] = []
    running: set[str] = set()
    finished: queue.Queue = queue.Queue()
    stop = False   # no new stage starts (a failure with jobs=1, or an error in prepare)

    def worker(name: str, inline: bool = False) -> None:
        try:
            execute(name)
            finished.put((name, None))
        except Exception as e:   # handed to the calling thread, which raises it
            finished.put((name, e))
        except BaseException as e:   # in a worker thread: handed on too (in the calling thread: raised)
            if inline:
                raise
            finished.put((name, e))

    while True:
        launched = True
        while launched and not stop and len(running) < jobs:
            launched = False
            for name in list(pending):
                wanted = [d for d in deps.get(name, ()) if d in order]
                if any(d in failures or d in blocked for d in wanted):
                    pending.remove(name)
                    blocked.append(name)
                    launched = True
                    break
                if not all(result.get(d) for d in wanted):
                    continue
                if any(d in pending or d in running for d in after.get(name, ()) if d in order):
                    continue
                pending.remove(name)
                try:
                    go = prepare(name)
                except BaseException:
                    stop = True
                    _wait(running, finished, result, failures)
                    raise
                if go and jobs == 1:   # in this thread, as a sequential run always did (Ctrl-C reaches papermill)
                    running.add(name)
                    worker(name, inline=True)
                elif go:
                    running.add(name)
                    threading.Thread(target=worker, args=(name,), name=f"stage-{name}", daemon=True).start()
                else:
                    result[name] = "skipped"
                launched = True
                break
        if not running:
            break
        if not _take(running, finished, result, failures):
            stop = stop or jobs == 1
    if not failures:
        return result
    if jobs == 1 or (len(failures) == 1 and not blocked):
        raise next(iter(failures.values()))
    raise StagesFailed(failures, blocked)


def _wait(running: set, finished: queue.Queue, result: dict, failures: dict) -> None:
    """Let the stages already running finish (their kernels keep the run's lock meaningful)."""
    while running:
        _take(running, finished, result, failures)


def _take(running: set, finished: queue.Queue, result: dict, failures: dict) -> bool:
    """The next stage to end, recorded as ran or failed; True when it ran."""
    name, err = finished.get()
    running.discard(name)
    if err is None:
        result[name] = "ran"
    else:
        failures[name] = err
    return err is None
