"""A scripted backend for tests of code that calls the LLM layer (no model needed).

``ScriptedBackend(respond)`` answers each request with ``respond(request)`` (a string, or a
``ChatResult`` for full control, e.g. an ``error``). It goes through the same cache, accounting and
``run_with_parser`` machinery as the real backends, and records what it was asked in ``seen``.
Set ``fail_after`` to raise ``KeyboardInterrupt`` after that many calls (a simulated kill).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator

from .base import Backend, Job
from .cache import ResponseCache
from .types import ChatRequest, ChatResult


class ScriptedBackend(Backend):
    name = "scripted"

    def __init__(self, respond: Callable[[ChatRequest], str | ChatResult], model_id: str = "scripted",
                 cache: ResponseCache | None = None, fail_after: int | None = None, **kw):
        kw.setdefault("progress", False)
        super().__init__(model_id, cache, **kw)
        self.respond = respond
        self.fail_after = fail_after
        self.seen: list[ChatRequest] = []

    def _generate(self, jobs: list[Job]) -> Iterator[tuple[int, ChatResult]]:
        for i, req, _seed in jobs:
            if self.fail_after is not None and len(self.seen) >= self.fail_after:
                raise KeyboardInterrupt("simulated kill")
            self.seen.append(req)
            out = self.respond(req)
            if isinstance(out, str):
                out = ChatResult(text=out, prompt_tokens=sum(len(m["content"].split()) for m in req.messages),
                                 completion_tokens=len(out.split()), finish_reason="stop")
            yield i, out
