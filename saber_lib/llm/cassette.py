"""Cassettes: every request of a real model run with its raw answer, recorded and replayed.

A cassette is a JSON Lines file, one request per line::

    {"key": <the cache's request key>, "template": "pairwise_judge_logprob", "meta": {...},
     "model": <llm.model>, "backend": "llamacpp", "model_sha256": <of the model file>,
     "messages": [...], "temperature": 0.0, "max_tokens": 1, "json_schema": {...} | null,
     "choices": null, "logprobs_for": ["1", "2"], "attempt": 0,
     "text": ..., "logprobs": {"1": -0.3, "2": -1.4} | null, "finish_reason": "length",
     "prompt_tokens": 912, "completion_tokens": 1, "latency_s": 14.2, "error": null}

The key is :meth:`Backend.cache_key` (the response cache's :func:`request_key`), so a request
has one hash whether it is cached, recorded or replayed.

Recording (``llm.record: PATH``): :class:`CassetteRecorder` is attached to a backend
(``Backend.recorder``); :meth:`Backend.chat_batch` hands it every answer of every batch, cached or
fresh, failed or not, and it appends the requests it has not recorded yet (a resumed run records
nothing twice; several stages append to one file in turn).

Replaying (``llm.backend: replay``, ``llm.cassette: PATH``): :class:`ReplayBackend` answers from
the cassette by key, with the recorded text, log-probabilities, finish reason and token counts;
a request the cassette does not hold raises :class:`LLMError` naming its template and key (a
changed prompt, parser retry pattern or sampling setting shows up at once).
Relative paths are taken from the project root.
"""
from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..core.data import PROJECT_ROOT, existing_file, strict_json_loads
from .base import Backend, Job
from .types import ChatRequest, ChatResult, LLMError


def cassette_path(path: str | Path) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() else PROJECT_ROOT / p


def entry(key: str, req: ChatRequest, res: ChatResult, *, model: str, backend: str,
          model_sha256: str | None) -> dict[str, Any]:
    """One cassette line (see the module docstring)."""
    return {
        "key": key, "template": req.meta.get("template"), "meta": dict(req.meta),
        "model": model, "backend": backend, "model_sha256": model_sha256,
        "messages": list(req.messages), "temperature": req.temperature, "max_tokens": req.max_tokens,
        "json_schema": req.json_schema, "choices": list(req.choices) if req.choices is not None else None,
        "logprobs_for": list(req.logprobs_for) if req.logprobs_for is not None else None,
        "attempt": req.attempt, "text": res.text, "logprobs": res.logprobs,
        "finish_reason": res.finish_reason, "prompt_tokens": res.prompt_tokens,
        "completion_tokens": res.completion_tokens, "latency_s": round(float(res.latency_s), 3),
        "error": res.error,
    }


def load_cassette(path: str | Path) -> list[dict[str, Any]]:
    """The entries of a cassette in file order; a bad line is an error naming the file and line."""
    return [e for _, e in numbered_entries(path)]


def numbered_entries(path: str | Path) -> list[tuple[int, dict[str, Any]]]:
    """``(line number, entry)`` of a cassette in file order (:func:`load_cassette`). Lines are read
    strictly: a key twice in one object, NaN or Infinity are errors naming the file and line."""
    path = cassette_path(path)
    try:   # nothing, a folder or a FIFO there: one error naming it (a FIFO is never opened)
        existing_file(path, "llm.cassette:")
    except FileNotFoundError as e:
        raise LLMError(str(e)) from None
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                e = strict_json_loads(line)
            except ValueError as err:
                raise LLMError(f"{path}:{n}: not a JSON line ({err})") from None
            if not isinstance(e, dict) or not isinstance(e.get("key"), str) or "text" not in e:
                raise LLMError(f"{path}:{n}: a cassette entry needs 'key' and 'text'")
            out.append((n, e))
    return out


# what a replayed request gets back: two lines of one key must agree on these (timings may differ)
ANSWER_FIELDS = ("text", "logprobs", "finish_reason", "error", "prompt_tokens", "completion_tokens")


def entries_by_key(path: Path, lines: list[tuple[int, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """The entries of a cassette by key; a key recorded twice with different answers is an error
    naming the file and both lines (identical answers are one entry)."""
    out: dict[str, dict[str, Any]] = {}
    where: dict[str, int] = {}
    for n, e in lines:
        first = out.setdefault(e["key"], e)
        where.setdefault(e["key"], n)
        diff = [f for f in ANSWER_FIELDS if first.get(f) != e.get(f)]
        if diff:
            raise LLMError(f"{path}: lines {where[e['key']]} and {n} record the key {e['key']} with different "
                           f"answers ({diff[0]} differs): a replay could serve either; keep one of them")
    return out


def check_model_sha256(path: Path, lines: list[tuple[int, dict[str, Any]]], model_id: str,
                       expected: str | None) -> None:
    """Every entry of ``model_id`` that records a ``model_sha256`` must record ``expected`` (the
    profile's model file); nothing to compare when the profile's model has no known hash."""
    if not expected:
        return
    for n, e in lines:
        got = e.get("model_sha256")
        if e.get("model") == model_id and got and got != expected:
            raise LLMError(f"{path}:{n}: recorded with model file sha256 {got}, but the profile's model "
                           f"{model_id!r} has sha256 {expected}: these answers came from another model file")


class CassetteRecorder:
    """Appends one line per request not yet in the file (thread-safe)."""

    def __init__(self, path: str | Path, model_sha256: str | None = None):
        self.path = cassette_path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.model_sha256 = model_sha256
        self._seen = {e["key"] for e in load_cassette(self.path)} if self.path.is_file() else set()
        self._lock = threading.Lock()

    def write(self, backend: Backend, keys, requests, results) -> int:
        """Record the requests of one batch (by key, first answer wins); returns how many were new."""
        lines = []
        with self._lock:
            for key, req, res in zip(keys, requests, results):
                if key in self._seen or res is None:
                    continue
                self._seen.add(key)
                lines.append(json.dumps(entry(key, req, res, model=backend.model_id, backend=backend.name,
                                              model_sha256=self.model_sha256), ensure_ascii=False))
            if lines:
                with open(self.path, "a", encoding="utf-8") as f:
                    f.write("\n".join(lines) + "\n")
        return len(lines)


class ReplayBackend(Backend):
    """Answers from a cassette (module docstring); never calls a model."""

    name = "replay"

    def __init__(self, model_id: str, cassette: str | Path, cache=None, model_sha256: str | None = None, **kw):
        super().__init__(model_id, cache, **kw)
        self.cassette = cassette_path(cassette)
        lines = numbered_entries(self.cassette)
        self.entries: dict[str, dict] = entries_by_key(self.cassette, lines)
        check_model_sha256(self.cassette, lines, model_id, model_sha256)
        models = {e.get("model") for e in self.entries.values()}
        if self.entries and model_id not in models:
            raise LLMError(f"llm.cassette: {self.cassette} records model(s) {sorted(map(str, models))}, "
                           f"not llm.model {model_id!r}")
        self.recorded_backend = ",".join(sorted({str(e.get("backend")) for e in self.entries.values()}))

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "llm_cassette": str(self.cassette),
                "llm_recorded_backend": self.recorded_backend}

    def _generate(self, jobs: list[Job]) -> Iterator[tuple[int, ChatResult]]:
        for i, req, _seed in jobs:
            key = self.cache_key(req)
            e = self.entries.get(key)
            if e is None:
                raise LLMError(f"replay: the cassette {self.cassette} has no answer for a "
                               f"{req.meta.get('template') or 'untemplated'} request with key {key} "
                               f"(attempt {req.attempt}); the prompt, its fields or the sampling settings "
                               f"differ from the recorded run: record it again")
            yield i, ChatResult(text=e["text"], prompt_tokens=int(e.get("prompt_tokens") or 0),
                                completion_tokens=int(e.get("completion_tokens") or 0),
                                latency_s=float(e.get("latency_s") or 0.0), finish_reason=e.get("finish_reason"),
                                error=e.get("error"), logprobs=e.get("logprobs"))


def judgment_requests(entries: list[dict[str, Any]], template: str = "pairwise_judge_logprob",
                      pairs: int | None = None) -> list[ChatRequest]:
    """The recorded first-attempt requests of ``template`` for the first ``pairs`` candidate pairs
    (``None``: all) that were judged in both orders, rebuilt as they were sent (messages with their
    prefill, sampling settings, options, meta): pair by pair, each in its recorded order. Sent to a
    :class:`ReplayBackend` over the same cassette they get the recorded answers back."""
    orders: dict[tuple, list[dict[str, Any]]] = {}
    for e in entries:
        meta = e.get("meta") or {}
        if e.get("template") != template or int(e.get("attempt") or 0) != 0 or "first" not in meta:
            continue
        pair = orders.setdefault((meta.get("query"), frozenset((meta["first"], meta["second"]))), [])
        if all(o["meta"]["first"] != meta["first"] for o in pair):
            pair.append(e)
    both = [pair for pair in orders.values() if len(pair) == 2]
    out = []
    for pair in both[:pairs]:
        for e in pair:
            out.append(ChatRequest(
                messages=list(e["messages"]), temperature=e.get("temperature"), max_tokens=e.get("max_tokens"),
                json_schema=e.get("json_schema"),
                choices=tuple(e["choices"]) if e.get("choices") is not None else None,
                logprobs_for=tuple(e["logprobs_for"]) if e.get("logprobs_for") is not None else None,
                attempt=0, meta=dict(e["meta"])))
    return out
