"""Any OpenAI-compatible chat-completions server (``vllm serve``, llama.cpp server, a hosted API).

Plain HTTP with ``httpx``. Requests are spread round-robin over ``base_urls`` (a retry moves to the
next URL), run on ``max_concurrency`` threads, each with a ``timeout_s`` deadline; HTTP 429, 5xx,
timeouts and connection errors are retried up to ``max_retries`` times after
``retry_backoff_s * 2**k`` seconds (or the server's ``Retry-After``, if shorter than 60 s). Other
4xx answers fail at once. The API key is read from the environment variable named by
``api_key_env`` and sent as a bearer token; it never appears in errors or logs.

Secrets: a base URL may carry ``user:password@`` (sent as HTTP basic auth by httpx). Every URL in an
error, in ``repr`` and in :meth:`describe` is shown redacted (``http://***@host``), and a server
body quoted in an error (``failure_reason``) has its ``Authorization`` header, bearer tokens, the
API key and the URL passwords masked (:mod:`saber_lib.llm.redact`).

Proxies: by default the environment is *not* trusted: ``HTTP_PROXY``, ``HTTPS_PROXY``,
``ALL_PROXY``, ``NO_PROXY`` (and ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``, ``.netrc``) are ignored, so
prompts, answers and the bearer key go straight to ``base_urls``, never through a proxy that happens
to be set in the shell. Set ``llm.trust_env: true`` in the profile (``trust_env=True`` here) to let
httpx use them, e.g. to reach a hosted API through a company proxy.

Guided decoding: ``json_schema`` is sent as the standard ``response_format``; ``choices`` and
``regex`` as vLLM's ``structured_outputs`` extension. The log-probability mode sends the prefill
as a final assistant message with ``continue_final_message`` (vLLM) and reads the first token's
``top_logprobs``.
"""
from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed

from .base import Backend, Job
from .redact import redact_text, redact_url, url_secrets
from .types import ChatRequest, ChatResult, LLMError

RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
TOP_LOGPROBS = 20


def _top_logprobs(choice: dict, options: tuple[str, ...]) -> dict[str, float | None]:
    content = ((choice.get("logprobs") or {}).get("content") or [])
    out: dict[str, float | None] = {o: None for o in options}
    if not content:
        return out
    for alt in content[0].get("top_logprobs") or []:
        tok = alt.get("token")
        if tok in out and out[tok] is None:
            out[tok] = float(alt["logprob"])
    return out


class OpenAIBackend(Backend):
    name = "openai"

    def __init__(self, model_id: str, base_urls: list[str], cache=None, *, api_key_env: str = "OPENAI_API_KEY",
                 served_model: str | None = None, max_concurrency: int = 8, timeout_s: float = 600.0,
                 max_retries: int = 3, retry_backoff_s: float = 1.0, trust_env: bool = False, **kw):
        super().__init__(model_id, cache, **kw)
        if not base_urls:
            raise LLMError("llm.base_urls: the openai backend needs at least one http://host:port/v1 URL")
        try:
            import httpx  # optional: only this backend needs it
        except ImportError:  # pragma: no cover
            raise LLMError("the openai backend needs httpx: pip install httpx") from None
        self._httpx = httpx
        self.base_urls = [u.rstrip("/") for u in base_urls]
        self.shown_urls = [redact_url(u) for u in self.base_urls]  # what errors and records show
        self.trust_env = bool(trust_env)
        self.served_model = served_model or model_id
        self.max_concurrency = max_concurrency
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.retry_backoff_s = retry_backoff_s
        self._api_key_env = api_key_env
        self._rr = itertools.count()
        self._rr_lock = threading.Lock()
        self._client = httpx.Client(timeout=httpx.Timeout(timeout_s), trust_env=self.trust_env,
                                    limits=httpx.Limits(max_connections=max_concurrency))

    def __repr__(self) -> str:
        return (f"OpenAIBackend(model={self.model_id!r}, base_urls={self.shown_urls!r}, "
                f"trust_env={self.trust_env})")

    def secrets(self) -> list[str]:
        key = os.environ.get(self._api_key_env) if self._api_key_env else None
        return ([key] if key else []) + [s for u in self.base_urls for s in url_secrets(u)]

    def describe(self) -> dict:
        return {**super().describe(), "llm_base_urls": list(self.shown_urls)}

    def _body(self, r) -> str:
        """The start of a server's answer, safe to record (masked before it is cut, so that a cut
        never leaves half a secret)."""
        return redact_text(r.text[:20000], self.secrets())[:300]

    def _headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/json"}
        key = os.environ.get(self._api_key_env) if self._api_key_env else None
        if key:
            h["Authorization"] = f"Bearer {key}"
        return h

    def payload(self, req: ChatRequest, seed: int) -> dict:
        body: dict = {"model": self.served_model, "messages": list(req.messages),
                      "temperature": req.temperature, "max_tokens": req.max_tokens, "seed": seed}
        if self.reasoning_effort is not None:
            body["reasoning_effort"] = self.reasoning_effort
        if req.json_schema is not None:
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": "answer", "schema": req.json_schema}}
        if req.choices is not None:
            body["structured_outputs"] = {"choice": list(req.choices)}
        if req.regex is not None:
            body["structured_outputs"] = {"regex": req.regex}
        if req.prefill is not None:
            body["continue_final_message"] = True
            body["add_generation_prompt"] = False
        if req.logprobs_for is not None:
            body["logprobs"] = True
            body["top_logprobs"] = TOP_LOGPROBS
            body["max_tokens"] = 1
        body.update(req.extra)
        return body

    def _next_url(self) -> int:
        with self._rr_lock:
            return next(self._rr)

    def _one(self, req: ChatRequest, seed: int) -> ChatResult:
        body = self.payload(req, seed)
        start = self._next_url()
        t0 = time.perf_counter()
        last = "no attempt made"
        for attempt in range(self.max_retries + 1):
            k = (start + attempt) % len(self.base_urls)
            url = self.base_urls[k] + "/chat/completions"
            shown = self.shown_urls[k] + "/chat/completions"
            wait = self.retry_backoff_s * (2 ** attempt)
            try:
                r = self._client.post(url, json=body, headers=self._headers())
            except self._httpx.TimeoutException:
                last = f"timeout after {self.timeout_s} s at {shown}"
            except self._httpx.TransportError as e:
                last = f"connection error at {shown}: {type(e).__name__}"
            else:
                if r.status_code == 200:
                    try:
                        return result_from_completion(r.json(), req, time.perf_counter() - t0)
                    except (ValueError, KeyError, IndexError, TypeError) as e:
                        last = redact_text(f"malformed response from {shown}: {type(e).__name__}: {e}",
                                           self.secrets())
                elif r.status_code in RETRY_STATUS or r.status_code >= 500:
                    last = f"HTTP {r.status_code} from {shown}: {self._body(r)[:200]}"
                    ra = r.headers.get("retry-after")
                    try:
                        if ra is not None and 0 <= float(ra) < 60:
                            wait = max(wait, float(ra))
                    except ValueError:
                        pass
                else:
                    return ChatResult(error=f"HTTP {r.status_code} from {shown}: {self._body(r)}",
                                      latency_s=time.perf_counter() - t0)
            if attempt < self.max_retries:
                time.sleep(wait)
        return ChatResult(error=f"gave up after {self.max_retries + 1} attempts; last: {last}",
                          latency_s=time.perf_counter() - t0)

    def _generate(self, jobs: list[Job]) -> Iterator[tuple[int, ChatResult]]:
        if not jobs:
            return
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(jobs))) as pool:
            futs = {pool.submit(self._one, req, seed): i for i, req, seed in jobs}
            try:
                for f in as_completed(futs):
                    yield futs[f], f.result()
            finally:
                for f in futs:
                    f.cancel()

    def close(self) -> None:
        self._client.close()


def result_from_completion(data: dict, req: ChatRequest, latency: float) -> ChatResult:
    """A ChatResult from an OpenAI-style chat-completion JSON (also llama.cpp's native answer)."""
    choice = data["choices"][0]
    text = (choice.get("message") or {}).get("content") or ""
    if req.prefill is not None and not text.startswith(req.prefill):
        text = req.prefill + text  # text is always the whole assistant message
    usage = data.get("usage") or {}
    res = ChatResult(text=text, prompt_tokens=int(usage.get("prompt_tokens") or 0),
                     completion_tokens=int(usage.get("completion_tokens") or 0),
                     latency_s=latency, finish_reason=choice.get("finish_reason"))
    if req.logprobs_for is not None:
        res.logprobs = _top_logprobs(choice, tuple(req.logprobs_for))
    return res
