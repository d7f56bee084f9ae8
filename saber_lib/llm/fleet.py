"""Request slots over a fleet of OpenAI-compatible servers (the ``openai`` backend's ``base_urls``).

Each server has ``capacity`` slots (``llm.server_concurrency``: the requests it serves at once, e.g.
vLLM's ``--max-num-seqs`` share for this client). A call takes a slot on the up server with the
fewest calls in flight (ties: round robin), so with as many concurrent calls as slots in total every
server is kept at its limit while there is work. A server that stops answering (connection error or
timeout) leaves the rotation for ``retry_s`` seconds; then one probe call is let through, and the
server is back with all its slots on the first answer (down again for ``retry_s`` on a failure).

The fleet belongs to one asyncio event loop (the backend's HTTP loop): :meth:`Fleet.pick` and
:meth:`Fleet.release` never block, :meth:`Fleet.acquire` waits (in the loop) for a slot.
"""
from __future__ import annotations

import asyncio
import time


class Fleet:
    def __init__(self, n_servers: int, capacity: int, retry_s: float = 30.0, clock=time.monotonic):
        if n_servers < 1 or capacity < 1:
            raise ValueError("a fleet needs at least one server and one slot per server")
        self.n = n_servers
        self.capacity = capacity
        self.retry_s = retry_s
        self.clock = clock
        self.busy = [0] * n_servers
        self.down_until = [0.0] * n_servers   # > now: out of the rotation
        self.probing = [False] * n_servers    # came back from down: one call until it answers
        self.served = [0] * n_servers
        self.failures = [0] * n_servers
        self._rr = 0
        self._changed: asyncio.Event | None = None   # set by release: a waiting acquire looks again

    def _free(self, k: int, now: float) -> bool:
        if self.down_until[k] > now:
            return False
        return self.busy[k] < (1 if self.probing[k] else self.capacity)

    def pick(self, avoid: int | None = None) -> int | None:
        """Take a slot now, on a server other than ``avoid`` when another one is free; ``None`` when
        no server in the rotation has a free slot (or none is in the rotation)."""
        now = self.clock()
        free = [k for k in range(self.n) if self._free(k, now)]
        if len(free) > 1 and avoid in free:
            free.remove(avoid)
        if not free:
            return None
        start = self._rr
        k = min(free, key=lambda j: (self.busy[j], (j - start) % self.n))
        self._rr = (k + 1) % self.n
        self.busy[k] += 1
        return k

    def all_down(self) -> bool:
        """Whether every server is out of the rotation now."""
        now = self.clock()
        return all(d > now for d in self.down_until)

    async def acquire(self, avoid: int | None = None) -> int | None:
        """A slot on a server (waits while every server in the rotation is busy); not ``avoid`` when
        another one is free. ``None`` when every server is out of the rotation: the caller counts a
        failed attempt (and may back off and retry) instead of waiting ``retry_s`` per call, so a
        fleet that is entirely down fails fast and the stage's failure budget decides."""
        while True:
            k = self.pick(avoid)
            if k is not None:
                return k
            if self.all_down():
                return None
            now = self.clock()
            waits = [d - now for d in self.down_until if d > now]   # a server coming back
            if self._changed is None:
                self._changed = asyncio.Event()
            try:
                await asyncio.wait_for(self._changed.wait(), min(waits) if waits else None)
            except asyncio.TimeoutError:
                pass

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def release(self, k: int, answered: bool) -> None:
        """Give the slot back; ``answered`` False (no answer at all) takes the server out."""
        self.busy[k] -= 1
        if answered:
            self.probing[k] = False
            self.served[k] += 1
        else:
            self.failures[k] += 1
            self.probing[k] = True
            self.down_until[k] = self.clock() + self.retry_s
        self._notify()

    def abandon(self, k: int) -> None:
        """Give the slot back without a verdict (the call was cancelled by the client)."""
        self.busy[k] -= 1
        self._notify()

    def any_up(self, but: int | None = None) -> bool:
        """Whether a server other than ``but`` is in the rotation now."""
        now = self.clock()
        return any(self.down_until[k] <= now for k in range(self.n) if k != but)

    def state(self) -> list[dict]:
        now = self.clock()
        return [{"busy": self.busy[k], "up": self.down_until[k] <= now, "served": self.served[k],
                 "failures": self.failures[k]} for k in range(self.n)]
