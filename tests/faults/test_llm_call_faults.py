"""Fault cases of single LLM calls: a server that trickles its answer (the call's deadline), and
answers that do not parse (never served from the cache to the rerun the failure message asks for).

Servers are real HTTP servers on 127.0.0.1 that stop by themselves; caches are real SQLite files.
"""
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from saber_lib import llm as L
from saber_lib.llm.testing import ScriptedBackend


class Trickle:
    """Answers 200 with a Content-Length, then one byte of the body every ``every_s`` seconds,
    ``max_bytes`` at most (then it closes): a bounded stand-in for a stalled server."""

    def __init__(self, every_s=0.25, max_bytes=40, body=b'{"choices": []}' + b" " * 200):
        self.served = 0
        server = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                server.served += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.flush()
                try:
                    for i in range(min(max_bytes, len(body))):
                        self.wfile.write(body[i:i + 1])
                        self.wfile.flush()
                        time.sleep(every_s)
                except OSError:   # the client hung up: what a deadline does
                    pass
                self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def _llm(url, **kw):
    return {"backend": "openai", "model": "m", "base_urls": [url], "api_key_env": "SABER_TEST_KEY",
            "max_concurrency": 2, "timeout_s": 1.0, "max_retries": 0, "retry_backoff_s": 0.0,
            "temperature": 0.0, "max_tokens": 16, "reasoning_effort": None, **kw}


def req(text):
    return L.ChatRequest([{"role": "user", "content": text}])


# --------------------------------------------------------------------------- the deadline
def test_a_trickling_answer_is_cut_at_the_deadline_and_the_error_says_how_long(monkeypatch):
    # old: each byte reset httpx's read timeout: the call took as long as the server trickled (10 s
    # here, 91 s in the field) and then said "timeout after 2.0 s" or failed to parse
    monkeypatch.delenv("SABER_TEST_KEY", raising=False)
    srv = Trickle()
    try:
        b = L.make_backend(_llm(f"http://127.0.0.1:{srv.port}/v1"), None, progress=False)
        t0 = time.monotonic()
        res = b.chat(req("hi"))
        took = time.monotonic() - t0
        b.close()
    finally:
        srv.close()
    assert res.error is not None and "timeout" in res.error, res.error
    assert took < 3.0, took                              # deadline 1 s, not the server's 10 s
    elapsed = float(res.error.split("/chat/completions after ")[1].split(" s")[0])
    assert 0.9 <= elapsed <= took + 0.05 and "llm.timeout_s = 1" in res.error


def test_a_prompt_answer_within_the_deadline_is_unaffected(monkeypatch):
    monkeypatch.delenv("SABER_TEST_KEY", raising=False)
    body = json.dumps({"choices": [{"message": {"content": "fine"}, "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 1, "completion_tokens": 1}}).encode()
    srv = Trickle(every_s=0.0, max_bytes=len(body), body=body)
    try:
        b = L.make_backend(_llm(f"http://127.0.0.1:{srv.port}/v1", timeout_s=5.0), None, progress=False)
        assert [r.text for r in b.chat_batch([req("a"), req("b"), req("c")])] == ["fine"] * 3
        b.close()
    finally:
        srv.close()


# --------------------------------------------------------------------------- unparseable answers
def test_unparseable_answers_are_not_served_from_the_cache_to_the_rerun(tmp_path):
    # old: the garbage was cached under the request's key: the rerun the budget message asks for
    # failed again without a single request
    db = tmp_path / "llm_cache.sqlite"
    parse = _ok
    bad = ScriptedBackend(lambda r: "garbage", cache=L.ResponseCache(db))
    first = L.run_with_parser(bad, [req("a"), req("b")], parse, retries=1)
    assert all(isinstance(f, L.Failure) for f in first) and len(bad.seen) == 4
    with pytest.raises(L.FailureBudgetExceeded, match="rerun"):
        L.check_results_budget(first, 0.5, stage="x")
    assert len(L.ResponseCache(db)) == 0                 # nothing kept that a rerun would be served

    fixed = ScriptedBackend(lambda r: "ok " + r.messages[-1]["content"], cache=L.ResponseCache(db))
    again = L.run_with_parser(fixed, [req("a"), req("b")], parse, retries=1)
    assert again == ["ok a", "ok b"] and len(fixed.seen) == 2
    # answers that parsed stay cached as before: a third run asks nothing
    third = ScriptedBackend(lambda r: pytest.fail("asked again"), cache=L.ResponseCache(db))
    assert L.run_with_parser(third, [req("a"), req("b")], parse) == ["ok a", "ok b"]


def _ok(text):
    if not text.startswith("ok"):
        raise L.ParseError(f"not ok: {text!r}")
    return text


def test_a_request_answered_on_retry_is_rerun_without_a_call(tmp_path):
    # the garbage of its first attempt stays: a resumed run reaches the same answer from the cache
    db = tmp_path / "llm_cache.sqlite"
    answers = iter(["garbage", "ok fine"])
    b = ScriptedBackend(lambda r: next(answers), cache=L.ResponseCache(db))
    assert L.run_with_parser(b, [req("a")], _ok, retries=1) == ["ok fine"] and len(L.ResponseCache(db)) == 2
    again = ScriptedBackend(lambda r: pytest.fail("asked again"), cache=L.ResponseCache(db))
    assert L.run_with_parser(again, [req("a")], _ok, retries=1) == ["ok fine"]
