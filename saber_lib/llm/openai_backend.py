"""Any OpenAI-compatible chat-completions server (``vllm serve``, llama.cpp server, a hosted API).

Plain HTTP with ``httpx``. Requests are spread over ``base_urls`` by a :class:`~.fleet.Fleet`: with
``server_concurrency`` = c > 0 each URL gets c slots and the client runs ``len(base_urls) * c``
threads, so every server is kept at its limit; with 0, ``max_concurrency`` threads share the URLs
(fewest in flight first, ties round robin). Each HTTP attempt has a ``timeout_s`` deadline for its
whole answer, however slowly the body trickles in (until the headers arrive, httpx's per-phase
timeout of ``timeout_s`` applies); HTTP 429, 5xx,
timeouts and connection errors are retried up to ``max_retries`` times after
``retry_backoff_s * 2**k`` seconds (or the server's ``Retry-After``, if shorter than 60 s), on
another URL when there is one. A URL that gives no answer at all (connection error, timeout) leaves
the rotation for ``server_retry_s`` seconds and is then probed with one call; the call it failed
moves to a server that is up at once, without using one of its retries (once per URL). Other
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

import os
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed

from .base import Backend, Job
from .fleet import Fleet
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


class _Deadline:
    """Shuts a socket down once ``seconds`` have passed since creation (unless disarmed first)."""

    def __init__(self, seconds: float):
        self._lock = threading.Lock()
        self._sock = None
        self._done = self.expired = False
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def _shutdown(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)   # wakes a blocked recv; httpx then drops the connection
        except OSError:
            pass

    def _expire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.expired = True
            if self._sock is not None:
                self._shutdown()

    def arm(self, sock) -> None:
        """The socket the answer arrives on (None when the transport does not expose one)."""
        with self._lock:
            self._sock = sock
            if self.expired and sock is not None:
                self._shutdown()

    def disarm(self) -> None:
        self._timer.cancel()
        with self._lock:
            self._done = True


class OpenAIBackend(Backend):
    name = "openai"

    def __init__(self, model_id: str, base_urls: list[str], cache=None, *, api_key_env: str = "OPENAI_API_KEY",
                 served_model: str | None = None, max_concurrency: int = 8, timeout_s: float = 600.0,
                 max_retries: int = 3, retry_backoff_s: float = 1.0, trust_env: bool = False,
                 server_concurrency: int = 0, server_retry_s: float = 30.0, **kw):
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
        n = len(self.base_urls)
        self.threads = n * server_concurrency if server_concurrency else max_concurrency
        self._last_no_answer = "no answer"   # why the last server left the rotation (shown when all are out)
        self.fleet = Fleet(n, server_concurrency or max_concurrency, server_retry_s)
        # one connection pool per URL: a pool's bookkeeping grows with the connections it holds
        per_url = server_concurrency or max_concurrency
        self._clients = [httpx.Client(timeout=httpx.Timeout(timeout_s), trust_env=self.trust_env,
                                      limits=httpx.Limits(max_connections=per_url,
                                                          max_keepalive_connections=per_url))
                         for _ in self.base_urls]

    def __repr__(self) -> str:
        return (f"OpenAIBackend(model={self.model_id!r}, base_urls={self.shown_urls!r}, "
                f"trust_env={self.trust_env})")

    def secrets(self) -> list[str]:
        key = os.environ.get(self._api_key_env) if self._api_key_env else None
        return ([key] if key else []) + [s for u in self.base_urls for s in url_secrets(u)]

    def describe(self) -> dict:
        servers = [{"url": u, "served": s["served"], "failures": s["failures"]}
                   for u, s in zip(self.shown_urls, self.fleet.state())]
        return {**super().describe(), "llm_base_urls": list(self.shown_urls), "llm_servers": servers}

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

    def _post(self, k: int, body: dict):
        """One HTTP attempt on URL ``k``: ``(response or None, failure reason or None)``.

        ``timeout_s`` is a deadline for the whole answer, not only for each read: httpx's own
        timeout bounds each phase (connect, each read), so a server that sends its headers and
        then one byte a second would hold the call forever. A timer shuts the connection's socket
        down when the deadline passes, which ends a read in progress (the socket is known once the
        headers arrived; before that httpx's timeout bounds each connect and read)."""
        shown = self.shown_urls[k] + "/chat/completions"
        t0 = time.monotonic()
        watch = _Deadline(self.timeout_s)
        try:
            with self._clients[k].stream("POST", self.base_urls[k] + "/chat/completions", json=body,
                                         headers=self._headers()) as r:
                stream = r.extensions.get("network_stream")
                watch.arm(stream.get_extra_info("socket") if stream is not None else None)
                r.read()
            return r, None
        except self._httpx.TimeoutException:
            pass
        except self._httpx.TransportError as e:
            if not watch.expired:
                return None, f"connection error at {shown}: {type(e).__name__}"
        finally:
            watch.disarm()
        return None, (f"timeout: no complete answer from {shown} after {time.monotonic() - t0:.1f} s "
                      f"(llm.timeout_s = {self.timeout_s:g})")

    def _one(self, req: ChatRequest, seed: int) -> ChatResult:
        body = self.payload(req, seed)
        t0 = time.perf_counter()
        last = "no attempt made"
        attempt = tries = 0
        free_moves = len(self.base_urls)   # moves off a server that gave no answer, not counted as retries
        k = None
        while True:
            wait = self.retry_backoff_s * (2 ** attempt)
            got = self.fleet.acquire(avoid=k)
            tries += 1
            if got is None:   # every server is out of the rotation: a failed attempt, no request sent
                r, last = None, f"every server is out of the rotation; last: {self._last_no_answer}"
            else:
                k = got
                shown = self.shown_urls[k] + "/chat/completions"
                r, last_err = self._post(k, body)
                self.fleet.release(k, answered=r is not None)
            if got is None:
                pass              # counted as a failed attempt below (back off, retry or give up)
            elif r is None:
                last = self._last_no_answer = last_err
                if free_moves > 0 and self.fleet.any_up(but=k):
                    free_moves -= 1
                    continue          # out of the rotation; the call goes to a server that is up now
            elif r.status_code == 200:
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
            if attempt >= self.max_retries:
                break
            attempt += 1
            time.sleep(wait)
        return ChatResult(error=f"gave up after {tries} attempts; last: {last}",
                          latency_s=time.perf_counter() - t0)

    def _generate(self, jobs: list[Job]) -> Iterator[tuple[int, ChatResult]]:
        if not jobs:
            return
        with ThreadPoolExecutor(max_workers=min(self.threads, len(jobs))) as pool:
            futs = {pool.submit(self._one, req, seed): i for i, req, seed in jobs}
            try:
                for f in as_completed(futs):
                    yield futs[f], f.result()
            finally:
                for f in futs:
                    f.cancel()

    def close(self) -> None:
        for c in self._clients:
            c.close()


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
