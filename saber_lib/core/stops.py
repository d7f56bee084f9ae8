"""A command stopped from outside (Ctrl-C, ``kill``, ``timeout``, a closed terminal) ends through its
``finally`` blocks, like an error: what it made in a temporary place (a work folder beside ``--out``,
a kernel's connection file) goes, and the user reads one line.

Python turns Ctrl-C (SIGINT) into :class:`KeyboardInterrupt`; SIGTERM and SIGHUP end the process at
once by default, with no ``finally`` run. Inside :func:`stop_on_signals` they raise :class:`Stopped`
(a :class:`KeyboardInterrupt`) as well; a second signal while the first one unwinds is ignored
(``timeout`` sends its signal twice: to the command and to its process group), so the clean-up
started is never cut short. :func:`stopped_line` and :func:`exit_status` give the command's last
line and status (130 for Ctrl-C, 128 + the signal's number otherwise, as a shell reports them).
"""
from __future__ import annotations

import contextlib
import signal
import threading

SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Stopped(KeyboardInterrupt):
    """Raised where the command was when a SIGTERM or SIGHUP arrived (``signum``: which)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def stop_on_signals(signals=SIGNALS):
    """Inside the block SIGTERM and SIGHUP raise :class:`Stopped` and Ctrl-C its
    :class:`KeyboardInterrupt`; after the first of them further ones are ignored until the block is
    left, so the clean-up they started runs to its end. The previous handlers come back after the
    block. Outside the main thread (where Python runs no signal handler) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    stopping = []

    def handler(signum, _frame):
        if stopping:          # the first stop is unwinding: let its clean-up finish
            return
        stopping.append(signum)
        raise KeyboardInterrupt() if signum == signal.SIGINT else Stopped(signum)

    handled = [*signals] + ([signal.SIGINT] if signal.getsignal(signal.SIGINT) is signal.default_int_handler else [])
    previous = {s: signal.signal(s, handler) for s in handled}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def exit_status(exc: KeyboardInterrupt) -> int:
    """130 for Ctrl-C, 128 + the signal's number for :class:`Stopped`."""
    return 128 + (exc.signum if isinstance(exc, Stopped) else signal.SIGINT)


def stopped_line(command: str, exc: KeyboardInterrupt) -> str:
    """The one line a stopped command prints (to standard error): how it was stopped."""
    how = f"stopped ({signal.Signals(exc.signum).name})" if isinstance(exc, Stopped) else "interrupted (Ctrl-C)"
    return f"{command}: {how}"
