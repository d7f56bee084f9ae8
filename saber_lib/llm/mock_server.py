"""A loopback OpenAI-compatible chat server for tests and benchmarks of the ``openai`` backend.

``MockChatServer(latency_s, limit)`` listens on 127.0.0.1 (a free port), answers every
``POST /v1/chat/completions`` with ``echo:<last user message>`` after ``latency_s`` seconds
(``latency_fn(message) -> (seconds, words)``, when given, sets both per request: the answer then
carries ``words`` more words, as a longer generation takes longer; ``answer_fn(message) -> text``,
when given, answers with that text instead of the echo, e.g. a verdict a parser reads), serving
at most ``limit`` requests at once (more wait in line, as a vLLM server queues them; 0 = no limit).
It counts what it received and answered per user message (``received``, ``answered``: Counters by
message), or, with ``count_prompts=False``, the totals alone (a rehearsal of millions of distinct
prompts would otherwise hold every prompt: ~6 GB at 1.5M judgments); ``n_received`` and
``n_answered`` are the totals either way; and the most requests it served at once.
``die()`` makes it stop answering (the listening socket closes, requests in flight get their
connection closed without an answer); ``revive()`` brings it back on the same port.
"""
from __future__ import annotations

import json
import socket
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024


class MockChatServer:
    def __init__(self, latency_s: float = 0.0, limit: int = 0, port: int = 0, latency_fn=None, answer_fn=None,
                 count_prompts: bool = True):
        self.latency_s = latency_s
        self.count_prompts = count_prompts
        self.latency_fn = latency_fn
        self.answer_fn = answer_fn
        self.limit = limit
        self._slots = threading.BoundedSemaphore(limit) if limit else None
        self._lock = threading.Lock()
        self.received: Counter = Counter()
        self.answered: Counter = Counter()
        self.n_received = 0
        self.n_answered = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.dead = False
        self.port = port
        self._srv: _Server | None = None
        self._start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _start(self) -> None:
        self._srv = _Server(("127.0.0.1", self.port), self._handler())
        self.port = self._srv.server_address[1]
        threading.Thread(target=self._srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def die(self) -> None:
        self.dead = True
        if self._srv is not None:
            self._srv.shutdown()
            self._srv.server_close()
            self._srv = None

    def revive(self) -> None:
        self.dead = False
        self._start()

    def stop(self) -> None:
        self.die()

    def _handler(self):
        mock = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"   # keep-alive, as a real server

            def log_message(self, *a):
                pass

            def _drop(self):
                self.close_connection = True
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                user = body["messages"][-1]["content"]
                if mock.dead:
                    return self._drop()
                with mock._lock:
                    mock.n_received += 1
                    if mock.count_prompts:
                        mock.received[user] += 1
                if mock._slots is not None:
                    mock._slots.acquire()
                try:
                    with mock._lock:
                        mock.in_flight += 1
                        mock.max_in_flight = max(mock.max_in_flight, mock.in_flight)
                    wait, words = mock.latency_fn(user) if mock.latency_fn else (mock.latency_s, 0)
                    if wait:
                        time.sleep(wait)
                    with mock._lock:
                        mock.in_flight -= 1
                finally:
                    if mock._slots is not None:
                        mock._slots.release()
                if mock.dead:
                    return self._drop()
                text = mock.answer_fn(user) if mock.answer_fn else f"echo:{user}"
                data = json.dumps({"choices": [{"index": 0, "finish_reason": "stop",
                                                "message": {"role": "assistant", "content": text + " w" * words}}],
                                   "usage": {"prompt_tokens": len(user), "completion_tokens": 1 + words}}).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    self.wfile.flush()
                except OSError:
                    return
                with mock._lock:
                    mock.n_answered += 1
                    if mock.count_prompts:
                        mock.answered[user] += 1

        return Handler
