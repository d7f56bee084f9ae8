"""The backend interface: cache lookup, accounting and progress around a backend's ``_generate``.

A concrete backend implements only ``_generate(jobs)``: given ``[(i, request, seed), ...]`` (the
cache misses, defaults resolved) it yields ``(i, ChatResult)`` as each call completes, in any
order. :meth:`Backend.chat_batch` writes every successful result to the cache the moment it is
yielded, so an interrupted batch loses at most the calls in flight (answers that meet a locked
cache file are kept in memory and written at the end of the batch, see ``cache.ResponseCache``).

Every ``ChatResult.error`` passes through :func:`redact.redact_text` with the backend's
:meth:`Backend.secrets` before anyone sees it, so failure reasons never carry a key or a password.
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from ..core.progress import Progress
from .cache import ResponseCache, request_key
from .redact import redact_text
from .types import ChatRequest, ChatResult

MAX_FIRST_ERRORS = 5

Job = tuple[int, ChatRequest, int]


class Backend:
    """Base class of every backend. See the package docstring for the contract."""

    name = "base"

    def __init__(self, model_id: str, cache: ResponseCache | None = None, *,
                 temperature: float = 1.0, max_tokens: int = 1024,
                 reasoning_effort: str | None = None, progress: bool = True,
                 progress_min: int = 16):
        self.model_id = model_id
        self.cache = cache
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.reasoning_effort = reasoning_effort
        self.progress = progress
        self.progress_min = progress_min
        self.recorder = None  # a cassette.CassetteRecorder (llm.record): gets every answer of every batch
        self.reset_usage()

    # ------------------------------------------------------------------ accounting
    def reset_usage(self) -> None:
        self._usage = dict(calls=0, cached=0, failed=0, tokens_in=0, tokens_out=0, wall_s=0.0)
        self._first_errors: list[str] = []

    def first_errors(self) -> list[str]:
        """The first few failure reasons (redacted) since creation or ``reset_usage``, in the
        order they came; with ``usage()["failed"]`` for the failure budget (``llm.budget``)."""
        return list(self._first_errors)

    def secrets(self) -> list[str]:
        """Strings that must never appear in an error or a record (API keys, URL passwords)."""
        return []

    def usage(self) -> dict[str, Any]:
        """Counters since creation (or ``reset_usage``): ``calls`` made to the model, answers
        served from the ``cached`` store, ``failed`` calls, ``tokens_in`` / ``tokens_out`` of the
        calls made, and ``wall_s`` spent in ``chat_batch``."""
        u = dict(self._usage)
        u["wall_s"] = round(u["wall_s"], 3)
        return u

    def model_sha256(self) -> str | None:
        """sha256 of the model's weights file where the backend has one (recorded in cassettes)."""
        return None

    def describe(self) -> dict[str, Any]:
        """Provenance for ``ctx.record``: backend, model and usage."""
        return {"llm_backend": self.name, "llm_model": self.model_id, "llm_usage": self.usage(),
                "llm_first_errors": self.first_errors()}

    # ------------------------------------------------------------------ keys
    def resolve(self, req: ChatRequest) -> ChatRequest:
        """Fill ``temperature`` / ``max_tokens`` from the backend's defaults."""
        changes = {}
        if req.temperature is None:
            changes["temperature"] = self.temperature
        if req.max_tokens is None:
            changes["max_tokens"] = self.max_tokens
        return dataclasses.replace(req, **changes) if changes else req

    def cache_key(self, req: ChatRequest) -> str:
        """sha256 over the model id, messages, sampling parameters and guided-decoding spec."""
        req = self.resolve(req)
        return request_key({
            "model": self.model_id, "messages": list(req.messages),
            "temperature": req.temperature, "max_tokens": req.max_tokens,
            "json_schema": req.json_schema, "regex": req.regex,
            "choices": list(req.choices) if req.choices is not None else None,
            "logprobs_for": list(req.logprobs_for) if req.logprobs_for is not None else None,
            "seed": req.seed, "attempt": req.attempt, "extra": req.extra,
            "reasoning_effort": self.reasoning_effort,
        })

    @staticmethod
    def seed_for(req: ChatRequest, key: str) -> int:
        return req.seed if req.seed is not None else int(key[:8], 16) & 0x7FFFFFFF

    # ------------------------------------------------------------------ calls
    def chat_batch(self, requests: Sequence[ChatRequest], desc: str | None = None) -> list[ChatResult]:
        """Answer every request (cache first); results in request order. Never raises for a
        failed call: its ``ChatResult.error`` says why."""
        t0 = time.perf_counter()
        requests = [self.resolve(r) for r in requests]
        keys = [self.cache_key(r) for r in requests]
        results: list[ChatResult | None] = [None] * len(requests)
        first_of: dict[str, int] = {}
        jobs: list[Job] = []
        for i, (req, key) in enumerate(zip(requests, keys)):
            hit = self.cache.get(key) if self.cache is not None else None
            if hit is not None:
                results[i] = hit
                self._usage["cached"] += 1
            elif key in first_of:
                continue  # the same request twice in one batch: one call
            else:
                first_of[key] = i
                jobs.append((i, req, self.seed_for(req, key)))
        bar = Progress("calls", len(jobs), bar=self.progress and len(jobs) >= self.progress_min,
                       desc=desc or f"{self.name}:{self.model_id}")
        finished = False
        answers = self._generate(jobs)
        try:
            for i, res in answers:
                if res.error is not None:
                    res = dataclasses.replace(res, error=redact_text(res.error, self.secrets()))
                results[i] = res
                if res.error is None:
                    self._usage["calls"] += 1
                    self._usage["tokens_in"] += res.prompt_tokens
                    self._usage["tokens_out"] += res.completion_tokens
                    if self.cache is not None:
                        self.cache.put(keys[i], self.model_id, res)
                else:
                    self._usage["failed"] += 1
                    if len(self._first_errors) < MAX_FIRST_ERRORS:
                        self._first_errors.append(res.error)
                bar.update(1)
            finished = True
        finally:
            getattr(answers, "close", lambda: None)()   # left early: the backend stops its calls in flight
            bar.close()
            self._usage["wall_s"] += time.perf_counter() - t0
            if self.cache is not None and self.cache.pending:
                if finished:
                    self.cache.flush()  # waits for a lock to clear; raises naming the file
                else:
                    try:  # interrupted: keep what can be kept without hiding the interruption
                        self.cache.flush(wait_s=1.0)
                    except Exception:
                        pass
        for i, key in enumerate(keys):
            if results[i] is None:  # duplicate of an earlier request in this batch
                src = results[first_of[key]]
                if src is None:
                    raise RuntimeError(f"{self.name} backend returned no result for request {first_of[key]}")
                results[i] = dataclasses.replace(src, cached=src.cached or src.error is None)
        if self.recorder is not None:
            self.recorder.write(self, keys, requests, results)
        return results  # type: ignore[return-value]

    def forget(self, request: ChatRequest) -> None:
        """Drop the cached answer of ``request`` (an answer that did not parse is not an answer)."""
        if self.cache is not None:
            self.cache.discard(self.cache_key(request))

    def chat(self, request: ChatRequest) -> ChatResult:
        return self.chat_batch([request])[0]

    def choice_logprobs(self, requests: Sequence[ChatRequest], options: Iterable[str] = ("1", "2"),
                        desc: str | None = None) -> list[ChatResult]:
        """Log-probability of each option as the next token after each request's messages.

        Each request should end with an assistant prefill such as ``\\boxed{`` (see
        ``prompts.render("pairwise_judge_logprob", ...)``). ``ChatResult.logprobs`` maps each
        option to its log-probability, ``None`` when the backend could not see it (outside the
        top-k it reports). Cached like chat calls.
        """
        return self.chat_batch([self.logprob_request(r, options) for r in requests], desc=desc)

    @staticmethod
    def logprob_request(request: ChatRequest, options: Iterable[str] = ("1", "2")) -> ChatRequest:
        """The request :meth:`choice_logprobs` sends (and caches) for ``request``: one greedy token
        with the log-probabilities of ``options``."""
        return dataclasses.replace(request, logprobs_for=tuple(options), max_tokens=1, temperature=0.0)

    def _generate(self, jobs: list[Job]) -> Iterator[tuple[int, ChatResult]]:  # pragma: no cover
        raise NotImplementedError

    def close(self) -> None:
        """Release the engine / connections (the cache stays usable until the object is dropped)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
