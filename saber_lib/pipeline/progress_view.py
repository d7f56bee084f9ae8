"""What ``saber run`` shows while its stages run: each running stage, its elapsed time and its own
progress (the counters its notebook writes through :mod:`saber_lib.core.progress`), with the time
left where the total is known: ``tournament  2m10s  round 7/20, texts 120/580  ~3m05s left``.

* On a terminal: one live line, redrawn in place (all running stages on it, ``|`` between them).
* On a pipe or in a log: plain lines, per running stage at most every ``min_s`` seconds (when a
  count moved) and at least every ``max_s`` seconds (a heartbeat with the elapsed time, even when no
  count moved), none in a stage's first ``min_s`` seconds. Defaults 10 and 30 s;
  ``SABER_PROGRESS_INTERVALS=MIN,MAX`` sets others.

Each stage's progress file lives in a temporary folder of the run (:func:`progress_folder`), outside
the run directory, and is removed with it, also when the run is interrupted or terminated.
"""
from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ..core.progress import read_state

INTERVALS_ENV = "SABER_PROGRESS_INTERVALS"
DEFAULT_INTERVALS = (10.0, 30.0)


def intervals_from_env() -> tuple[float, float]:
    """``(min_s, max_s)`` from ``SABER_PROGRESS_INTERVALS`` (``"MIN,MAX"``), else the defaults."""
    raw = os.environ.get(INTERVALS_ENV, "").strip()
    if not raw:
        return DEFAULT_INTERVALS
    try:
        lo, hi = (float(x) for x in raw.split(","))
    except ValueError:
        raise SystemExit(f"{INTERVALS_ENV}={raw!r}: expected MIN,MAX seconds, e.g. 10,30") from None
    if not 0 <= lo <= hi:
        raise SystemExit(f"{INTERVALS_ENV}={raw!r}: expected 0 <= MIN <= MAX")
    return lo, hi


def duration(seconds: float) -> str:
    """``42s``, ``3m05s``, ``1h02m``."""
    s = int(round(max(seconds, 0)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def counts_text(states: list[dict], now: float) -> str:
    """The counters, outermost first (``round 7/20, texts 120/580``), and the time left estimated
    from the outermost counter with a known total that has counted something."""
    parts, eta = [], None
    for st in states:
        count, total = st.get("count", 0), st.get("total")
        parts.append(f"{st.get('unit', '')} {count:,}" + (f"/{total:,}" if total is not None else ""))
        if eta is None and total and 0 < count <= total and st.get("started"):
            eta = (now - st["started"]) * (total - count) / count
    return ", ".join(parts) + (f"  ~{duration(eta)} left" if eta is not None else "")


@dataclass
class _Running:
    path: Path
    started: float
    last_print: float
    last_key: tuple = ()
    states: list = field(default_factory=list)


class ProgressView:
    """The running stages' progress, shown through ``emit`` (plain lines) or on ``stream`` (live)."""

    def __init__(self, emit=print, *, live: bool = False, stream=None, intervals: tuple[float, float] | None = None,
                 clock=time.monotonic, wallclock=time.time):
        self.emit, self.live, self.stream = emit, live, stream or sys.stdout
        self.min_s, self.max_s = intervals or intervals_from_env()
        self.clock, self.wallclock = clock, wallclock
        self._running: dict[str, _Running] = {}
        self._lock = threading.RLock()
        self._shown = False

    def begin(self, stage: str, path: Path) -> None:
        """``stage`` started; its notebook writes its counters to ``path``."""
        now = self.clock()
        with self._lock:
            self._running[stage] = _Running(Path(path), now, now)

    def end(self, stage: str) -> None:
        with self._lock:
            self._running.pop(stage, None)
            self._clear()

    def log(self, message: str) -> None:
        """A line of the run's log (``[run ]``, ``[done]``), printed above the live line."""
        with self._lock:
            self._clear()
            self.emit(message)

    def line(self, stage: str) -> str:
        """The stage's progress as shown now."""
        with self._lock:
            r = self._running[stage]
            text = counts_text(r.states, self.wallclock())
            return f"{stage}  {duration(self.clock() - r.started)}" + (f"  {text}" if text else "")

    def tick(self) -> None:
        """Read every running stage's counters and show what is due."""
        with self._lock:
            now = self.clock()
            for name, r in self._running.items():
                r.states = read_state(r.path)
            if self.live:
                self._draw(" | ".join(self.line(n) for n in self._running))
                return
            for name, r in self._running.items():
                key = tuple((s.get("unit"), s.get("count"), s.get("total")) for s in r.states)
                since = now - r.last_print
                if now - r.started < self.min_s:
                    continue
                if since >= self.max_s or (since >= self.min_s and key and key != r.last_key):
                    self.emit(f"[....] {self.line(name)}")
                    r.last_print, r.last_key = now, key

    def _draw(self, text: str) -> None:
        if not text:
            return self._clear()
        width = shutil.get_terminal_size((120, 20)).columns - 1
        self.stream.write("\r\x1b[K" + text[:width])
        self.stream.flush()
        self._shown = True

    def _clear(self) -> None:
        if self.live and self._shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._shown = False

    @contextmanager
    def polling(self, every: float | None = None):
        """Show progress from a background thread while the block runs (every ``every`` seconds)."""
        every = every or (0.5 if self.live else max(0.05, min(1.0, self.min_s / 4)))
        stop = threading.Event()

        def loop():
            while not stop.wait(every):
                self.tick()

        thread = threading.Thread(target=loop, name="saber-progress", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join()
            with self._lock:
                self._clear()


@contextmanager
def progress_folder():
    """A temporary folder for the stages' progress files, removed when the block ends, also on Ctrl-C
    and, where nothing else handles SIGTERM, on SIGTERM (turned into ``SystemExit(143)`` meanwhile)."""
    folder = Path(tempfile.mkdtemp(prefix="saber-progress-"))
    previous = None
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield folder
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        shutil.rmtree(folder, ignore_errors=True)


def _terminate(signum, frame):
    raise SystemExit(128 + signum)
