"""Fault cases in the LLM layer (the library part of failing LLM stages, and LLM profile errors):
secrets in URLs and server bodies, proxies from the environment, damaged and locked caches, and
the failure budget. Servers are real HTTP servers on 127.0.0.1; locks are held by a second real
process; caches are real SQLite files.
"""
import base64
import json
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from saber_lib import llm as L
from saber_lib.llm.testing import ScriptedBackend

KEY = "sk-live-very-secret-4242"
PASSWORD = "hunter2-pass"


# --------------------------------------------------------------------------- loopback servers
class Server:
    """A chat-completions server on 127.0.0.1. ``mode``: ``ok`` answers, ``echo-500`` answers 500
    with a body that echoes the request headers (as some gateways do), ``fail-every:N`` fails each
    N-th request with 500. Every request is recorded (path, headers)."""

    def __init__(self, mode="ok"):
        self.mode, self.seen, self.n = mode, [], 0
        self.lock = threading.Lock()
        server = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with server.lock:
                    server.n += 1
                    n = server.n
                    server.seen.append((self.path, dict(self.headers)))
                if server.mode == "echo-500" or (server.mode.startswith("fail-every:")
                                                 and n % int(server.mode.split(":")[1]) == 0):
                    echo = {"Authorization": self.headers.get("Authorization"), **dict(self.headers)}
                    self._send(500, {"error": "upstream failed", "request_headers": echo})
                    return
                msg = json.loads(body)["messages"][-1]["content"]
                self._send(200, {"choices": [{"message": {"content": f"answer to {msg}"}, "finish_reason": "stop"}],
                                 "usage": {"prompt_tokens": 3, "completion_tokens": 3}})

            def _send(self, code, obj):
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _llm(urls, **kw):
    return {"backend": "openai", "model": "m", "base_urls": urls, "api_key_env": "SABER_TEST_KEY",
            "max_concurrency": 2, "timeout_s": 5, "max_retries": 0, "retry_backoff_s": 0.0,
            "temperature": 0.0, "max_tokens": 16, "reasoning_effort": None, **kw}


def req(text):
    return L.ChatRequest([{"role": "user", "content": text}])


# --------------------------------------------------------------------------- secrets
def test_password_in_base_url_is_used_but_never_shown(server, monkeypatch):
    # old: http://user:password@host went as it is into errors, repr and records
    monkeypatch.setenv("SABER_TEST_KEY", KEY)
    url = f"http://alice:{PASSWORD}@127.0.0.1:{server.port}/v1"
    b = L.make_backend(_llm([url]), None, progress=False)
    assert b.chat(req("hi")).text == "answer to hi"
    assert "Authorization" in server.seen[0][1]
    shown = repr(b) + json.dumps(b.describe())
    assert PASSWORD not in shown and "alice" not in shown and KEY not in shown
    assert f"http://***@127.0.0.1:{server.port}/v1" in json.dumps(b.describe())


def test_basic_auth_from_url_reaches_the_server_without_a_key(server, monkeypatch):
    monkeypatch.delenv("SABER_TEST_KEY", raising=False)
    b = L.make_backend(_llm([f"http://alice:{PASSWORD}@127.0.0.1:{server.port}/v1"]), None, progress=False)
    b.chat(req("x"))
    want = "Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    assert server.seen[0][1]["Authorization"] == want


def test_error_at_a_url_with_password_is_redacted(monkeypatch):
    port = _closed_port()
    b = L.make_backend(_llm([f"http://alice:{PASSWORD}@127.0.0.1:{port}/v1"]), None, progress=False)
    [res] = L.run_with_parser(b, [req("x")], lambda t: t)
    assert isinstance(res, L.Failure) and "connection error" in res.reason
    assert PASSWORD not in res.reason and "alice" not in res.reason and "***@127.0.0.1" in res.reason


@pytest.mark.parametrize("userinfo", ["", f"bob:{PASSWORD}@"])
def test_server_body_echoing_the_authorization_header_is_masked(monkeypatch, userinfo):
    # old: failure_reason = 'HTTP 500 from ...: {"error": ..., "request_headers": {"Authorization": "Bearer sk-...'
    s = Server("echo-500")
    try:
        monkeypatch.setenv("SABER_TEST_KEY", KEY)
        b = L.make_backend(_llm([f"http://{userinfo}127.0.0.1:{s.port}/v1"]), None, progress=False)
        [res] = L.run_with_parser(b, [req("x")], lambda t: t)
        assert isinstance(res, L.Failure) and "HTTP 500" in res.reason
        sent = s.seen[0][1]["Authorization"]  # the server did see (and echo) it
        assert sent == (f"Bearer {KEY}" if not userinfo else
                        "Basic " + base64.b64encode(userinfo[:-1].encode()).decode())
        assert sent.split()[1] not in res.reason and KEY not in res.reason and PASSWORD not in res.reason
        assert "Authorization" in res.reason and "***" in res.reason
        assert sent.split()[1] not in " ".join(b.first_errors())
    finally:
        s.close()


def test_profile_repr_does_not_show_a_url_password(tmp_path):
    from pathlib import Path

    from saber_lib.core import config as cfg

    root = Path(__file__).resolve().parents[2]
    p = cfg.load_profile(root / "params" / "paper.yaml",
                         {"llm.base_urls": [f"http://u:{PASSWORD}@h:8000/v1"]})
    assert PASSWORD not in repr(p) and p.values["llm"]["base_urls"] == [f"http://u:{PASSWORD}@h:8000/v1"]
    assert L.redact_params(p.section("llm"))["base_urls"] == ["http://***@h:8000/v1"]


def test_redaction_helpers():
    assert L.redact_url(f"https://u:{PASSWORD}@h:1/v1?api_key=abc&x=1") == "https://***@h:1/v1?api_key=***&x=1"
    t = L.redact_text(f'401: {{"authorization": "Bearer {KEY}"}} key {KEY} at http://u:{PASSWORD}@h/v1',
                      secrets=[KEY])
    assert KEY not in t and PASSWORD not in t
    p = L.redact_params({"llm": {"base_urls": [f"http://u:{PASSWORD}@h/v1"], "model": "m"}})
    assert p == {"llm": {"base_urls": ["http://***@h/v1"], "model": "m"}}


# --------------------------------------------------------------------------- proxies
@pytest.fixture
def proxy_env(monkeypatch):
    """A bogus proxy (a real loopback server that records what it gets) set in the environment."""
    proxy = Server("echo-500")
    for var in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(var, raising=False)
    for var in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.setenv(var, f"http://127.0.0.1:{proxy.port}")
    monkeypatch.setenv("SABER_TEST_KEY", KEY)
    yield proxy
    proxy.close()


def test_environment_proxy_is_ignored_by_default(server, proxy_env):
    # old: every prompt and the bearer key went through $HTTP_PROXY
    b = L.make_backend(_llm([f"http://127.0.0.1:{server.port}/v1"]), None, progress=False)
    assert b.chat(req("hi")).text == "answer to hi"
    assert proxy_env.seen == [] and len(server.seen) == 1


def test_environment_proxy_is_used_when_the_profile_trusts_the_environment(server, proxy_env):
    b = L.make_backend(_llm([f"http://127.0.0.1:{server.port}/v1"], trust_env=True), None, progress=False)
    res = b.chat(req("hi"))
    assert res.error is not None and server.seen == []
    path, headers = proxy_env.seen[0]
    assert path == f"http://127.0.0.1:{server.port}/v1/chat/completions"  # absolute form: a proxy request
    assert KEY not in res.error


def test_profile_key_trust_env_defaults_to_false():
    from pathlib import Path

    from saber_lib.core import config as cfg

    root = Path(__file__).resolve().parents[2]
    assert cfg.load_profile(root / "params" / "paper.yaml").values["llm"]["trust_env"] is False


# --------------------------------------------------------------------------- the cache
def echo(r):
    return "re: " + r.messages[-1]["content"]


def test_damaged_cache_names_the_file_and_what_to_do(tmp_path):
    # old: sqlite3.DatabaseError: file is not a database (no file name)
    db = tmp_path / "llm_cache.sqlite"
    db.write_bytes(b"this is not a database" * 300)
    with pytest.raises(L.LLMError) as e:
        L.ResponseCache(db)
    assert str(db) in str(e.value) and "Move the file aside" in str(e.value)


def test_cache_damaged_after_opening_names_the_file(tmp_path):
    db = tmp_path / "llm_cache.sqlite"
    ScriptedBackend(echo, cache=L.ResponseCache(db)).chat_batch([req(f"q{i} " + "x" * 3000) for i in range(40)])
    cache = L.ResponseCache(db)
    con = sqlite3.connect(db)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    data = bytearray(db.read_bytes())
    data[4096:] = b"\x07" * (len(data) - 4096)  # every page after the first overwritten
    db.write_bytes(bytes(data))
    with pytest.raises(L.LLMError) as e:
        ScriptedBackend(echo, cache=cache).chat_batch([req("q1 " + "x" * 3000)])
    assert str(db) in str(e.value) and "damaged" in str(e.value)


HOLD = """
import sqlite3, sys, time
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
con.execute("COMMIT")
"""


def _hold_lock(db, seconds):
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(db), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "locked"
    return p


def test_answers_received_while_the_cache_is_locked_are_written_when_it_clears(tmp_path):
    # old: put() waited 60 s, then sqlite3.OperationalError "database is locked"; the answers were lost
    db = tmp_path / "llm_cache.sqlite"
    cache = L.ResponseCache(db, lock_wait_s=20)
    holder = _hold_lock(db, 1.5)
    try:
        t0 = time.perf_counter()
        b = ScriptedBackend(echo, cache=cache)
        out = b.chat_batch([req(f"q{i}") for i in range(5)])
        assert [r.text for r in out] == [f"re: q{i}" for i in range(5)]
        assert time.perf_counter() - t0 < 15  # waited for the lock once, not per answer
    finally:
        holder.wait(timeout=30)
    assert cache.pending == 0
    again = ScriptedBackend(lambda r: pytest.fail("asked again"), cache=L.ResponseCache(db))
    assert all(r.cached for r in again.chat_batch([req(f"q{i}") for i in range(5)]))


def test_answers_kept_in_memory_are_served_and_written_after_a_lock_that_outlasts_the_wait(tmp_path):
    db = tmp_path / "llm_cache.sqlite"
    cache = L.ResponseCache(db, lock_wait_s=0.3)
    holder = _hold_lock(db, 2.5)
    try:
        with pytest.raises(L.LLMError) as e:
            ScriptedBackend(echo, cache=cache).chat_batch([req("a"), req("b")])
        msg = str(e.value)
        assert str(db) in msg and "locked by another process" in msg and "2 answer(s) not yet written" in msg
        # the answers are not lost: served from memory without a model call
        b = ScriptedBackend(lambda r: pytest.fail("asked again"), cache=cache)
        assert cache.get(b.cache_key(req("a"))).text == "re: a"
    finally:
        holder.wait(timeout=30)
    cache.flush()
    assert cache.pending == 0 and len(L.ResponseCache(db)) == 2


KILLED_CLIENT = """
import os, sys, time
from saber_lib import llm as L
from saber_lib.llm.testing import ScriptedBackend
db, done_file, hang = sys.argv[1], sys.argv[2], sys.argv[3]

def respond(r):
    if r.messages[-1]["content"] == hang:
        print("hanging", flush=True)
        time.sleep(120)                      # killed here, mid-batch
    return "re: " + r.messages[-1]["content"]

b = ScriptedBackend(respond, cache=L.ResponseCache(db, flush_every=8, flush_s=3600.0))
for r in range(4):
    b.chat_batch([L.ChatRequest(messages=[{"role": "user", "content": f"r{r} q{j}"}]) for j in range(20)])
    with open(done_file, "a") as f:         # the caller marks the round done once chat_batch returned
        f.write(f"{r}\\n")
        f.flush()
        os.fsync(f.fileno())
print("calls", " ".join(q.messages[-1]["content"].replace(" ", "_") for q in b.seen), flush=True)
"""


def test_sigkill_mid_batch_loses_no_answer_marked_done(tmp_path):
    """Grouped cache writes: a client SIGKILLed mid-batch has every answer of the rounds it marked
    done on disk; the answers of the unwritten group were never marked done and are asked again."""
    db, done = tmp_path / "llm_cache.sqlite", tmp_path / "done.txt"
    cmd = [sys.executable, "-c", KILLED_CLIENT, str(db), str(done)]
    p = subprocess.Popen(cmd + ["r2 q13"], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "hanging"
    finally:
        p.kill()                                 # SIGKILL: no finally block, no flush
        p.wait(timeout=30)
    assert done.read_text().split() == ["0", "1"]
    probe = ScriptedBackend(echo)
    cache = L.ResponseCache(db)

    def stored(text):
        return cache.get(probe.cache_key(req(text))) is not None

    assert all(stored(f"r{r} q{j}") for r in (0, 1) for j in range(20))       # marked done -> stored
    # round 2: 13 answers received before the kill; groups of 8 -> 8 written, the 5 after them lost
    assert [j for j in range(20) if stored(f"r2 q{j}")] == list(range(8))
    cache.close()
    again = subprocess.run(cmd + ["never"], capture_output=True, text=True, timeout=120, check=True)
    calls = again.stdout.split("calls", 1)[1].split()
    # the restart asks exactly what is not stored: the rest of round 2 and the rounds never run
    assert calls == [f"r2_q{j}" for j in range(8, 20)] + [f"r{r}_q{j}" for r in (2, 3) for j in range(20)][20:]
    assert done.read_text().split() == ["0", "1", "0", "1", "2", "3"]
    final = L.ResponseCache(db)
    assert all(final.get(probe.cache_key(req(f"r{r} q{j}"))) is not None for r in range(4) for j in range(20))


# --------------------------------------------------------------------------- the failure budget
def test_all_calls_failing_exceed_the_budget_with_counts_and_reasons():
    # old: every call failed, the stage printed [done] and exit 0
    port = _closed_port()
    b = L.make_backend(_llm([f"http://127.0.0.1:{port}/v1"]), None, progress=False)
    parsed = L.run_with_parser(b, [req(f"q{i}") for i in range(5)], lambda t: t, retries=1)
    with pytest.raises(L.FailureBudgetExceeded) as e:
        L.check_results_budget(parsed, max_rate=0.02, stage="summaries")
    msg = str(e.value)
    assert msg.startswith("stage summaries: 5 of 5 LLM requests failed (100.0%; every call failed)")
    assert "connection error" in msg and "\n" not in msg
    assert (e.value.n_calls, e.value.n_failed) == (5, 5)
    # the backend's own accounting gives the raw calls: 5 requests x 2 attempts, all failed
    assert L.backend_failure_counts(b)[:2] == (10, 10)
    with pytest.raises(L.FailureBudgetExceeded):
        L.check_backend_budget(b, 1.0, "summaries")  # nothing answered: never a result


def test_server_errors_below_and_above_the_budget():
    s = Server("fail-every:5")  # 500 for every 5th request: 20% of the calls
    try:
        b = L.make_backend(_llm([f"http://127.0.0.1:{s.port}/v1"], max_concurrency=1), None, progress=False)
        parsed = L.run_with_parser(b, [req(f"q{i}") for i in range(10)], lambda t: t, retries=0)
        n, failed, reasons = L.results_failure_counts(parsed)
        assert (n, failed) == (10, 2) and all("HTTP 500" in r for r in reasons)
        L.check_results_budget(parsed, max_rate=0.2, stage="topics")  # at the budget: passes
        with pytest.raises(L.FailureBudgetExceeded, match=r"2 of 10 .*above llm.max_failure_rate = 0.1"):
            L.check_results_budget(parsed, max_rate=0.1, stage="topics")
    finally:
        s.close()


def test_budget_rule_edges():
    L.check_failure_budget(0, 0, [], 0.0, "x")
    L.check_failure_budget(100, 0, [], 0.0, "x")
    with pytest.raises(L.FailureBudgetExceeded):
        L.check_failure_budget(100, 1, ["r"], 0.0, "x")
    with pytest.raises(ValueError):
        L.check_failure_budget(1, 2, [], 0.5, "x")
    with pytest.raises(ValueError):
        L.check_failure_budget(1, 0, [], 1.5, "x")


def test_shipped_profiles_set_a_failure_budget():
    from pathlib import Path

    from saber_lib.core import config as cfg

    root = Path(__file__).resolve().parents[2]
    paper = cfg.load_profile(root / "params" / "paper.yaml").values["llm"]["max_failure_rate"]
    demo = cfg.load_profile(root / "params" / "demo.yaml").values["llm"]["max_failure_rate"]
    assert 0 < paper <= demo < 1
