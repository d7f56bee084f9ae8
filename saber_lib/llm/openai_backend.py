"""Any OpenAI-compatible chat-completions server (``vllm serve``, llama.cpp server, a hosted API).

Plain HTTP with ``aiohttp`` on one asyncio event loop in a background thread (started with the
first batch, stopped by :meth:`OpenAIBackend.close` or when the backend is dropped): each call is a
coroutine, so a fleet of servers x slots costs one thread, not one per call. Requests are spread
over ``base_urls`` by a :class:`~.fleet.Fleet`: with ``server_concurrency`` = c > 0 each URL gets
c slots and ``len(base_urls) * c`` calls run at once, so every server is kept at its limit; with 0,
``max_concurrency`` calls share the URLs (fewest in flight first, ties round robin). Connections
are kept alive and reused. Each HTTP attempt has a ``timeout_s`` deadline for its whole answer
(connecting, sending, the headers and the whole body, however slowly it trickles in); HTTP 429,
5xx, timeouts and connection errors are retried up to ``max_retries`` times after
``retry_backoff_s * 2**k`` seconds (or the server's ``Retry-After``, if shorter than 60 s), on
another URL when there is one. A URL that gives no answer at all (connection error, timeout) leaves
the rotation for ``server_retry_s`` seconds and is then probed with one call; the call it failed
moves to a server that is up at once, without using one of its retries (once per URL). Other
4xx answers fail at once. The API key is read from the environment variable named by
``api_key_env`` and sent as a bearer token; it never appears in errors or logs.

Secrets: a base URL may carry ``user:password@`` (sent as HTTP basic auth instead of the bearer
key). Every URL in an error, in ``repr`` and in :meth:`describe` is shown redacted
(``http://***@host``), and a server body quoted in an error (``failure_reason``) has its
``Authorization`` header, bearer tokens, the API key and the URL passwords masked
(:mod:`saber_lib.llm.redact`).

Proxies: by default the environment is *not* trusted: ``HTTP_PROXY``, ``HTTPS_PROXY``,
``NO_PROXY`` (and ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``, ``.netrc``) are ignored, so prompts,
answers and the bearer key go straight to ``base_urls``, never through a proxy that happens to be
set in the shell. Set ``llm.trust_env: true`` in the profile (``trust_env=True`` here) to let the
client use them, e.g. to reach a hosted API through a company proxy.

Guided decoding: ``json_schema`` is sent as the standard ``response_format``; ``choices`` and
``regex`` as vLLM's ``structured_outputs`` extension. The log-probability mode sends the prefill
as a final assistant message with ``continue_final_message`` (vLLM) and reads the first token's
``top_logprobs``. The answer is the message's ``content``; a reasoning model's
``reasoning_content`` is not part of it.
"""
from __future__ import annotations

import asyncio
import json
import os
import queue
import ssl
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterator

from .base import Backend, Job
from .fleet import Fleet
from .redact import redact_text, redact_url, url_secrets
from .types import ChatRequest, ChatResult, LLMError

RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
TOP_LOGPROBS = 20
STOP_WAIT_S = 10.0   # how long closing the client or cancelling a batch waits for the HTTP loop
HANDOVER_S = 0.05    # answers reach the calling thread in groups, at most this long after they came


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


class Reply:
    """A server's whole HTTP answer: ``status_code``, ``content`` (bytes) and ``headers``."""

    __slots__ = ("status_code", "content", "headers")

    def __init__(self, status_code: int, content: bytes, headers):
        self.status_code, self.content, self.headers = status_code, content, headers

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self):
        return json.loads(self.content)


def _ssl_context(trust_env: bool) -> ssl.SSLContext:
    """Certificates for https URLs: the system's store; ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` only
    count with ``trust_env``."""
    if trust_env:
        return ssl.create_default_context()
    paths = ssl.get_default_verify_paths()
    cafile = paths.openssl_cafile if os.path.isfile(paths.openssl_cafile) else None
    capath = paths.openssl_capath if os.path.isdir(paths.openssl_capath) else None
    if cafile is None and capath is None:   # pragma: no cover (no store: https fails on verification)
        return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    return ssl.create_default_context(cafile=cafile, capath=capath)


class _Loop:
    """The client's event loop in a daemon thread and its HTTP session (one connection pool for
    every URL); started on first use and again in a forked child, stopped by :meth:`stop`."""

    def __init__(self, timeout_s: float, trust_env: bool):
        self.timeout_s, self.trust_env = timeout_s, trust_env
        self.loop = self.thread = self.session = None
        self.pid = None
        self._lock = threading.Lock()

    def get(self):
        with self._lock:
            if self.loop is None or self.pid != os.getpid() or not self.thread.is_alive():
                self.pid = os.getpid()
                self.loop = asyncio.new_event_loop()
                self.thread = threading.Thread(target=self.loop.run_forever, name="saber-llm-http", daemon=True)
                self.thread.start()
                self.session = asyncio.run_coroutine_threadsafe(self._open(), self.loop).result()
            return self

    async def _open(self):
        import aiohttp  # optional: only the openai backend needs it
        connector = aiohttp.TCPConnector(limit=0, ssl=_ssl_context(self.trust_env))  # the fleet limits calls
        return aiohttp.ClientSession(connector=connector, trust_env=self.trust_env,
                                     timeout=aiohttp.ClientTimeout(total=self.timeout_s))

    def stop(self) -> None:
        with self._lock:
            loop, thread, session = self.loop, self.thread, self.session
            self.loop = self.thread = self.session = None
            if loop is None or self.pid != os.getpid() or not thread.is_alive():
                return
            try:
                asyncio.run_coroutine_threadsafe(session.close(), loop).result(STOP_WAIT_S)
            except Exception:
                pass
            loop.call_soon_threadsafe(loop.stop)
            thread.join(STOP_WAIT_S)
            if not thread.is_alive():
                loop.close()


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
            import aiohttp  # optional: only this backend needs it
            from yarl import URL  # aiohttp's URL type
        except ImportError:  # pragma: no cover
            raise LLMError("the openai backend needs aiohttp: pip install aiohttp") from None
        self._aiohttp = aiohttp
        self.base_urls = [u.rstrip("/") for u in base_urls]
        self.shown_urls = [redact_url(u) for u in self.base_urls]  # what errors and records show
        # where each request goes, and the basic auth header of a URL that carries user:password@
        self._targets = []
        for u in self.base_urls:
            url = URL(u + "/chat/completions")
            basic = aiohttp.BasicAuth.from_url(url)
            self._targets.append((url.with_user(None), basic.encode() if basic is not None else None))
        self.trust_env = bool(trust_env)
        self.served_model = served_model or model_id
        self.max_concurrency = max_concurrency
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.retry_backoff_s = retry_backoff_s
        self._api_key_env = api_key_env
        n = len(self.base_urls)
        self.slots = n * server_concurrency if server_concurrency else max_concurrency   # calls at once
        self._last_no_answer = "no answer"   # why the last server left the rotation (shown when all are out)
        self.fleet = Fleet(n, server_concurrency or max_concurrency, server_retry_s)
        self._net = _Loop(timeout_s, self.trust_env)
        weakref.finalize(self, self._net.stop)   # a dropped backend stops its loop thread

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

    def _headers(self, k: int) -> dict[str, str]:
        h = {"Content-Type": "application/json"}
        basic = self._targets[k][1]
        key = os.environ.get(self._api_key_env) if self._api_key_env else None
        if basic is not None:      # a URL's user:password@ is the credential there
            h["Authorization"] = basic
        elif key:
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

    async def _post(self, k: int, body: bytes) -> tuple[Reply | None, str | None]:
        """One HTTP attempt on URL ``k``: ``(reply or None, failure reason or None)``. The session's
        ``timeout_s`` is a deadline for the whole answer (a server that sends its headers and then
        one byte a second is cut there), not a timeout per read."""
        t0 = time.monotonic()
        try:
            async with self._net.session.post(self._targets[k][0], data=body, headers=self._headers(k)) as r:
                return Reply(r.status, await r.read(), r.headers), None
        except asyncio.TimeoutError:
            pass
        except (self._aiohttp.ClientError, OSError) as e:
            return None, f"connection error at {self.shown_urls[k]}/chat/completions: {type(e).__name__}"
        return None, (f"timeout: no complete answer from {self.shown_urls[k]}/chat/completions after "
                      f"{time.monotonic() - t0:.1f} s (llm.timeout_s = {self.timeout_s:g})")

    async def _one(self, req: ChatRequest, seed: int) -> ChatResult:
        body = json.dumps(self.payload(req, seed), ensure_ascii=False, separators=(",", ":")).encode()
        t0 = time.perf_counter()
        last = "no attempt made"
        attempt = tries = 0
        free_moves = len(self.base_urls)   # moves off a server that gave no answer, not counted as retries
        k = None
        while True:
            wait = self.retry_backoff_s * (2 ** attempt)
            got = await self.fleet.acquire(avoid=k)
            tries += 1
            if got is None:   # every server is out of the rotation: a failed attempt, no request sent
                r, last = None, f"every server is out of the rotation; last: {self._last_no_answer}"
            else:
                k = got
                shown = self.shown_urls[k] + "/chat/completions"
                try:
                    r, last_err = await self._post(k, body)
                except BaseException:   # cancelled: the slot is free again, the server not at fault
                    self.fleet.abandon(k)
                    raise
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
            await asyncio.sleep(wait)
        return ChatResult(error=f"gave up after {tries} attempts; last: {last}",
                          latency_s=time.perf_counter() - t0)

    def _generate(self, jobs: list[Job]) -> Iterator[tuple[int, ChatResult]]:
        """Every job as a coroutine on the HTTP loop, ``slots`` at once, started in job order; the
        answers come back to the calling thread (which writes the cache) in groups, at most
        ``HANDOVER_S`` after each arrived, so that answers trickling in one by one do not wake it
        once each. Leaving early (an exception in the caller, an interrupt) cancels the calls in
        flight."""
        if not jobs:
            return
        net = self._net.get()
        answers: queue.SimpleQueue = queue.SimpleQueue()   # lists of (i, result); None: the batch ended
        outbox: list = []
        handover: list = [None]   # the scheduled hand-over of the outbox, if any
        todo = deque(jobs)
        ended = threading.Event()

        def hand_over():
            handover[0] = None
            answers.put(outbox[:])
            outbox.clear()

        async def worker():
            while todo:
                i, req, seed = todo.popleft()
                res = await self._one(req, seed)
                if handover[0] is None:
                    handover[0] = net.loop.call_later(HANDOVER_S, hand_over)
                outbox.append((i, res))

        async def batch():
            tasks = [asyncio.ensure_future(worker()) for _ in range(min(self.slots, len(jobs)))]
            try:
                await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            finally:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                if handover[0] is not None:
                    handover[0].cancel()
                    hand_over()
                answers.put(None)
                ended.set()
            for t in tasks:
                if not t.cancelled() and t.exception() is not None:
                    raise t.exception()

        fut = asyncio.run_coroutine_threadsafe(batch(), net.loop)
        try:
            while True:
                group = answers.get()
                if group is None:
                    break
                yield from group
            fut.result()   # a call that raised instead of returning a result (a defect) raises here
        finally:
            if not ended.is_set():
                fut.cancel()
                ended.wait(STOP_WAIT_S)

    def close(self) -> None:
        self._net.stop()


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
