"""The LLM layer: one backend interface, a persistent response cache, retries and accounting.

Every model call of the workbench goes through here.

Typical use in a stage::

    from saber_lib import llm as L, prompts
    backend = L.make_backend(llm, L.llm_cache_path(llm, run_dir, cache_dir))
    reqs = [prompts.request("solution_summary", problem=p, solution=s) for p, s in pairs]
    parsed = L.run_with_parser(backend, reqs, prompts.parser("solution_summary", max_words=30),
                               retries=summary_retries, desc="summaries")
    # parsed[k] is a dict, or a L.Failure with .reason
    ctx.record(**backend.describe())          # backend, model, usage -> manifest

API
---
``ChatRequest(messages, temperature=None, max_tokens=None, json_schema=None, regex=None,
choices=None, logprobs_for=None, seed=None, attempt=0, extra={})``
    One call. A last message with role ``assistant`` is a prefill the model continues.
``ChatResult(text, prompt_tokens, completion_tokens, latency_s, finish_reason, error, cached,
logprobs)``
    One answer; ``error`` is ``None`` on success. ``text`` is the whole assistant message
    (prefill included).
``make_backend(llm: dict, cache_path: Path | None) -> Backend``
    From the profile's ``llm`` section: ``backend`` = ``vllm`` | ``openai`` | ``llamacpp`` |
    ``replay`` (recorded answers from ``llm.cassette``, no model; ``saber_lib.llm.cassette``).
    ``llm.record: PATH`` appends every request and raw answer of the backend to that cassette.
    ``llm.model_path``: a file, ``pkg:<package>`` or ``cache:<model>`` (``saber_lib.llm.models``).
``llm_cache_path(llm, run_dir, cache_dir) -> Path``
    ``llm.cache``: ``run`` -> ``<run_dir>/llm_cache.sqlite``; ``shared`` -> ``<cache_dir>/llm_cache.sqlite``.
``Backend.chat_batch(requests, desc=None) -> list[ChatResult]``
    Cache first, then the model; results in request order; each answer is cached as it arrives.
``Backend.choice_logprobs(requests, options=("1", "2")) -> list[ChatResult]``
    ``ChatResult.logprobs[o]``: log-probability of option ``o`` as the next token (``None`` if
    the backend could not see it). Cached like chat calls.
``Backend.name``, ``Backend.model_id``, ``Backend.usage()`` (calls, cached, failed, tokens_in,
tokens_out, wall_s), ``Backend.describe()`` (for ``ctx.record``), ``Backend.reset_usage()``.
``run_with_parser(backend, requests, parser, retries, desc=None) -> list[value | Failure]``
    Retries failed and unparseable answers as new calls (``attempt`` + k); ``Failure.reason``. The
    answers of a request that never parsed are dropped from the cache, so a rerun asks again.
    Every parsed LLM read goes through its core, ``retry.ask_until_parsed``.
``logprob_pairwise(backend, requests_ab, requests_ba=None, options=("1","2"), retries=0) -> list["a"|"b"|"tie"|Failure]``
    The log-probability judge over both candidate orders; ``logprob_margin`` gives the number.
Parsers (``saber_lib.llm.parsers``, all strict, raising ``ParseError``): ``parse_json_object``,
``parse_boxed_choice``, ``parse_boxed_int``, ``parse_topic_scores``, ``parse_summary``,
``parse_latex_rewrite``, ``parse_tagged``, ``strip_thinking``.
Failure budget (``llm.max_failure_rate``; see ``saber_lib.llm.budget``): after its LLM work a stage
calls ``check_results_budget(parsed, llm["max_failure_rate"], stage="summaries")`` (or
``check_failure_budget(n_calls, n_failed, first_reasons, max_rate, stage)`` with its own counts,
or ``check_backend_budget(backend, ...)`` over ``Backend.usage()`` / ``Backend.first_errors()``);
past the budget it raises ``FailureBudgetExceeded`` with the counts and the first reasons.
Secrets: ``redact_url``, ``redact_text``, ``redact_params`` (``saber_lib.llm.redact``) mask URL
passwords, authorization headers and keys before anything is recorded; backend errors are redacted.
Proxies: the openai backend ignores ``HTTP_PROXY`` etc. unless ``llm.trust_env`` is true.
Tests of calling code: ``saber_lib.llm.testing.ScriptedBackend(respond)``.
Prompt templates: ``saber_lib.prompts`` (``render``, ``request``, ``parser``).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from .base import Backend
from .budget import (FailureBudgetExceeded, backend_failure_counts, check_backend_budget,
                     check_failure_budget, check_results_budget, results_failure_counts)
from .cache import ResponseCache, request_key
from .cassette import CassetteRecorder, ReplayBackend, load_cassette
from .llamacpp_backend import LlamaCppBackend
from .models import profile_model_sha256
from .openai_backend import OpenAIBackend
from .types import ParseError
from .parsers import (parse_boxed_choice, parse_boxed_int, parse_json_object, parse_latex_rewrite,
                      parse_summary, parse_tagged, parse_topic_scores, strip_thinking)
from .redact import MASK, redact_params, redact_text, redact_url
from .retry import logprob_margin, logprob_pairwise, run_with_parser
from .types import ChatRequest, ChatResult, Failure, LLMError
from .vllm_backend import VLLMBackend

__all__ = [
    "Backend", "ChatRequest", "CassetteRecorder", "ReplayBackend", "load_cassette", "ChatResult", "Failure", "LLMError", "ParseError", "ResponseCache",
    "make_backend", "llm_cache_path", "run_with_parser", "logprob_pairwise", "logprob_margin",
    "request_key", "parse_json_object", "parse_boxed_choice", "parse_boxed_int", "parse_topic_scores",
    "parse_summary", "parse_latex_rewrite", "parse_tagged", "strip_thinking",
    "FailureBudgetExceeded", "check_failure_budget", "check_results_budget", "check_backend_budget",
    "results_failure_counts", "backend_failure_counts", "redact_url", "redact_text", "redact_params", "BASE_URLS_ENV",
    "ENGINE_SECRETS_ENV", "real_engine_kwargs",
]

CACHE_FILE = "llm_cache.sqlite"
# the runner injects llm.base_urls with their credentials masked into a notebook (what it shows and
# records) and passes the real URLs to the kernel in this environment variable (a JSON list)
BASE_URLS_ENV = "SABER_LLM_BASE_URLS"
# likewise the values of llm.engine_kwargs that are credentials (redact.is_secret_key): masked in the
# notebook, the real ones in this variable (a JSON object)
ENGINE_SECRETS_ENV = "SABER_LLM_ENGINE_SECRETS"


def _real_base_urls(shown: list[str]) -> list[str]:
    """``llm.base_urls`` as the runner injected them, with the real URLs of ``BASE_URLS_ENV`` put
    back where a masked URL stands for one (same URL once masked)."""
    try:
        real = json.loads(os.environ.get(BASE_URLS_ENV) or "[]")
    except ValueError:
        return shown
    by_shown = {redact_url(u): u for u in real if isinstance(u, str)}
    return [by_shown.get(u, u) for u in shown]


def real_engine_kwargs(shown: dict) -> dict:
    """``llm.engine_kwargs`` as the runner injected them, with the real value of ``ENGINE_SECRETS_ENV``
    put back where a masked credential stands for one."""
    try:
        real = json.loads(os.environ.get(ENGINE_SECRETS_ENV) or "{}")
    except ValueError:
        real = {}
    real = real if isinstance(real, dict) else {}
    return {k: real[k] if v == MASK and k in real else v for k, v in (shown or {}).items()}


def llm_cache_path(llm: dict, run_dir, cache_dir) -> Path:
    """Where the response cache lives: the run directory (``llm.cache: run``) or the shared
    ``cache_dir`` (``llm.cache: shared``)."""
    where = llm.get("cache", "run")
    if where == "run":
        return Path(run_dir) / CACHE_FILE
    if where == "shared":
        return Path(cache_dir) / CACHE_FILE
    raise LLMError(f"llm.cache: {where!r} is not 'run' or 'shared'")


def make_backend(llm: dict, cache_path: Path | str | None = None, progress: bool = True) -> Backend:
    """Build the backend named by ``llm["backend"]`` with its cache (``None``: no cache)."""
    backend = _make_backend(llm, cache_path, progress)
    if llm.get("record"):
        backend.recorder = CassetteRecorder(llm["record"], backend.model_sha256())
    return backend


def _make_backend(llm: dict, cache_path, progress: bool) -> Backend:
    kind = llm.get("backend")
    if kind in (None, "none"):
        raise LLMError("llm.backend is 'none': this step needs an LLM backend "
                       "(set llm.backend to vllm, openai, llamacpp or replay, or choose a non-LLM scorer)")
    common = dict(temperature=llm.get("temperature", 1.0), max_tokens=llm.get("max_tokens", 1024),
                  reasoning_effort=llm.get("reasoning_effort"), progress=progress)
    if kind == "replay":  # recorded answers only: no cache, so every request is looked up in the cassette
        if not llm.get("cassette"):
            raise LLMError("llm.backend is 'replay' but llm.cassette names no file")
        # the cassette's model_sha256 must be the profile's model file's (when the profile names one)
        return ReplayBackend(llm["model"], llm["cassette"], None, model_sha256=profile_model_sha256(llm), **common)
    cache = (ResponseCache(cache_path, flush_every=llm.get("cache_flush_every", 64),
                           flush_s=llm.get("cache_flush_s", 1.0)) if cache_path is not None else None)
    model = llm["model"]
    if kind == "vllm":
        return VLLMBackend(model, llm.get("model_path"), cache,
                           tensor_parallel_size=llm.get("tensor_parallel_size", 1),
                           max_model_len=llm.get("max_model_len"),
                           max_concurrency=llm.get("max_concurrency", 256),
                           engine_kwargs=real_engine_kwargs(llm.get("engine_kwargs") or {}), **common)
    if kind == "openai":
        return OpenAIBackend(model, _real_base_urls(list(llm.get("base_urls") or [])), cache,
                             api_key_env=llm.get("api_key_env", "OPENAI_API_KEY"),
                             max_concurrency=llm.get("max_concurrency", 8),
                             timeout_s=float(llm.get("timeout_s", 600)),
                             max_retries=llm.get("max_retries", 3),
                             retry_backoff_s=float(llm.get("retry_backoff_s", 1.0)),
                             trust_env=bool(llm.get("trust_env", False)),
                             server_concurrency=llm.get("server_concurrency", 0),
                             server_retry_s=float(llm.get("server_retry_s", 30.0)), **common)
    if kind == "llamacpp":
        b = LlamaCppBackend(model, llm.get("model_path"), cache, n_ctx=llm.get("n_ctx", 4096),
                            threads=llm.get("cpu_threads", 0), prompt_cache=bool(llm.get("prompt_cache", True)),
                            engine_kwargs=real_engine_kwargs(llm.get("engine_kwargs") or {}), **common)
        if cache is not None:   # the cache's answers of this model id must be this file's
            try:
                cache.bind_model_file(model, b.model_sha256(), f"{llm.get('model_path')} ({b.gguf})")
            except LLMError:
                b.close()
                raise
        return b
    raise LLMError(f"llm.backend: unknown backend {kind!r} (vllm, openai, llamacpp, replay, none)")
