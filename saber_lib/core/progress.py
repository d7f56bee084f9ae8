"""Progress of a long loop, for the notebook and for ``saber run``.

A stage's long loop counts its units of work through :class:`Progress` (or :func:`track` around an
iterable): ``Progress("round", total=20)``, ``update()`` per round. Two readers see it:

* the notebook: a tqdm bar, where the loop asks for one (``bar=True``; otherwise nothing is shown,
  so the executed notebook's output is what it was);
* the runner: when ``saber run`` executes the stage it names a progress file in the kernel's
  environment (:data:`ENV`, a file in a temporary folder of the runner, never in the run directory,
  so progress never reaches an artifact or a hashed file). Every active counter of the process (a
  loop inside a loop: the judge embedding texts inside a tournament round) is written there as one
  JSON list, outermost first, replaced whole (write, then rename), at most every
  :data:`WRITE_INTERVAL_S` seconds and once more when a counter closes.

:func:`read_state` is the runner's side: the list of counters, or ``[]`` when the file is absent or
half-written.
"""
from __future__ import annotations

import json
import os
import threading
import time
from typing import Iterable, Iterator

ENV = "SABER_PROGRESS_FILE"
WRITE_INTERVAL_S = 0.5

_ACTIVE: list["Progress"] = []          # the open counters of this process, outermost first
_LOCK = threading.Lock()
_LAST_WRITE = [0.0]
_TRAILING: list = [None]                 # the timer of a write held back by the interval


class Progress:
    """A counter of one loop's units of work (``unit``: what is counted, e.g. ``"round"``,
    ``"problems"``; ``total``: how many, when known). A context manager: it closes on exit."""

    def __init__(self, unit: str, total: int | None = None, *, bar: bool = False, desc: str | None = None,
                 clock=time.time):
        self.unit, self.total, self.count = unit, (None if total is None else int(total)), 0
        self.clock = clock
        self.started = clock()
        self._bar = None
        if bar:
            from tqdm.auto import tqdm  # only when a bar is shown (the CLI's start stays light)
            self._bar = tqdm(total=self.total, desc=desc or unit, leave=False)
        with _LOCK:
            _ACTIVE.append(self)
        _publish(force=True)

    def update(self, n: int = 1) -> None:
        """``n`` more units done."""
        self.count += n
        if self._bar is not None:
            self._bar.update(n)
        _publish(force=self.count == self.total)

    def set(self, count: int, total: int | None = None) -> None:
        """The count (and the total, when it became known) as they are now."""
        if total is not None:
            self.total = int(total)
            if self._bar is not None:
                self._bar.total = self.total
        if self._bar is not None:
            self._bar.update(count - self.count)
        self.count = int(count)
        _publish()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        with _LOCK:
            if self in _ACTIVE:
                _ACTIVE.remove(self)
        _publish(force=True)

    def state(self) -> dict:
        return {"unit": self.unit, "count": self.count, "total": self.total, "started": self.started}

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def track(items: Iterable, unit: str, total: int | None = None, *, bar: bool = False,
          desc: str | None = None) -> Iterator:
    """``items`` one by one, each counted as one ``unit`` done once the caller's loop body for it ends
    (``total``: ``len(items)`` when it has one)."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)
    with Progress(unit, total, bar=bar, desc=desc) as p:
        for item in items:
            yield item
            p.update()


def _publish(force: bool = False) -> None:
    """Write the active counters to the runner's progress file (when it named one), throttled."""
    path = os.environ.get(ENV)
    if not path:
        return
    now = time.monotonic()
    with _LOCK:
        wait = WRITE_INTERVAL_S - (now - _LAST_WRITE[0])
        if not force and wait > 0:
            if _TRAILING[0] is None:   # the latest count is written once the interval is over
                _TRAILING[0] = threading.Timer(wait, _publish, kwargs={"force": True})
                _TRAILING[0].daemon = True
                _TRAILING[0].start()
            return
        _LAST_WRITE[0] = now
        if _TRAILING[0] is not None:
            _TRAILING[0].cancel()
            _TRAILING[0] = None
        states = [p.state() for p in _ACTIVE]
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w") as f:
            json.dump(states, f)
        os.replace(tmp, path)
    except OSError:   # the runner's folder is gone (it ended): progress is only ever shown
        pass


def read_state(path) -> list[dict]:
    """The counters a stage's process last wrote to ``path`` (outermost first; ``[]`` when none)."""
    try:
        with open(path) as f:
            states = json.load(f)
    except (OSError, ValueError):
        return []
    return states if isinstance(states, list) else []
