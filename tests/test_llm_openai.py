"""The openai backend against real chat-completions servers on 127.0.0.1 (stdlib http.server).

The servers misbehave on cue: a user message containing ``429-once:<id>`` / ``500-once:<id>`` /
``slow-once:<id>`` gets a 429 / a 500 / a reply slower than the client's timeout the first time
that id is seen, ``always-500`` always fails, ``bad-request`` gets a 400.
"""
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from saber_lib import llm as L

KEY = "sk-test-secret-123"
SLOW_S = 1.5
TIMEOUT_S = 0.5


class State:
    def __init__(self):
        self.lock = threading.Lock()
        self.seen_ids: set[str] = set()
        self.hits: list[tuple[int, str]] = []  # (server index, user content)
        self.bodies: list[dict] = []


def make_handler(state: State, index: int):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):  # keep test output clean
            pass

        def _send(self, code, obj, headers=()):
            data = json.dumps(obj).encode()
            try:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers:
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            user = body["messages"][-1]["content"]
            with state.lock:
                state.hits.append((index, user))
                state.bodies.append(body)
            if self.path != "/v1/chat/completions":
                return self._send(404, {"error": "not found"})
            if self.headers.get("Authorization") != f"Bearer {KEY}":
                return self._send(401, {"error": "bad key"})
            for cue in ("429-once:", "500-once:", "slow-once:"):
                if cue in user:
                    tag = cue + user.split(cue)[1].split()[0]
                    with state.lock:
                        first = tag not in state.seen_ids
                        state.seen_ids.add(tag)
                    if first and cue == "429-once:":
                        return self._send(429, {"error": "rate limited"}, [("Retry-After", "0")])
                    if first and cue == "500-once:":
                        return self._send(500, {"error": "internal"})
                    if first and cue == "slow-once:":
                        time.sleep(SLOW_S)
            if "always-500" in user:
                return self._send(500, {"error": "down"})
            if "bad-request" in user:
                return self._send(400, {"error": "context too long"})
            reply = {"choices": [{"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": f"echo:{user}|seed={body.get('seed')}"}}],
                     "usage": {"prompt_tokens": len(user), "completion_tokens": 2}}
            if body.get("logprobs"):
                reply["choices"][0]["message"]["content"] = "2"
                reply["choices"][0]["logprobs"] = {"content": [{"token": "2", "logprob": -0.1, "top_logprobs": [
                    {"token": "2", "logprob": -0.1}, {"token": "1", "logprob": -2.5}, {"token": "3", "logprob": -4.0}]}]}
            return self._send(200, reply)

    return Handler


@pytest.fixture()
def servers(monkeypatch):
    monkeypatch.setenv("SABER_TEST_KEY", KEY)
    state = State()
    srvs = [ThreadingHTTPServer(("127.0.0.1", 0), make_handler(state, i)) for i in range(2)]
    for s in srvs:
        s.daemon_threads = True
        threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    urls = [f"http://127.0.0.1:{s.server_address[1]}/v1" for s in srvs]
    yield urls, state
    for s in srvs:
        s.shutdown()
        s.server_close()


def backend(urls, cache_path=None, **over):
    cfg = {"backend": "openai", "model": "test/model", "base_urls": urls, "api_key_env": "SABER_TEST_KEY",
           "max_concurrency": 4, "timeout_s": TIMEOUT_S, "max_retries": 2, "retry_backoff_s": 0.01,
           "temperature": 0.7, "max_tokens": 32, "reasoning_effort": None}
    cfg.update(over)
    return L.make_backend(cfg, cache_path, progress=False)


def req(text, **kw):
    return L.ChatRequest(messages=[{"role": "user", "content": text}], **kw)


def test_round_robin_retries_and_timeouts(servers, tmp_path):
    urls, state = servers
    b = backend(urls, tmp_path / "c.sqlite")
    texts = [f"plain {i}" for i in range(6)] + ["429-once:a", "500-once:b", "slow-once:c"]
    out = b.chat_batch([req(t) for t in texts])
    assert all(r.ok for r in out), [r.error for r in out]
    for t, r in zip(texts, out):
        assert r.text.startswith(f"echo:{t}|seed=") and r.prompt_tokens == len(t) and r.completion_tokens == 2
    # every request landed on a server; both servers were used
    servers_used = {i for i, _ in state.hits}
    assert servers_used == {0, 1}
    # each misbehaving request was retried once, on the other server
    for t in ("429-once:a", "500-once:b", "slow-once:c"):
        hits = [i for i, u in state.hits if u == t]
        assert len(hits) == 2 and hits[0] != hits[1], (t, hits)
    # round robin: 9 first tries alternate (5 + 4), the 3 retries go to the other server
    per_server = [sum(1 for i, _ in state.hits if i == k) for k in (0, 1)]
    assert sum(per_server) == 12 and min(per_server) >= 4
    u = b.usage()
    assert (u["calls"], u["failed"], u["cached"]) == (9, 0, 0)
    # the seed sent is the reproducible one derived from the cache key
    assert out[0].text.endswith(f"seed={b.seed_for(req('plain 0'), b.cache_key(req('plain 0')))}")

    # second run: everything from the cache, no HTTP traffic
    n_hits = len(state.hits)
    b2 = backend(urls, tmp_path / "c.sqlite")
    out2 = b2.chat_batch([req(t) for t in texts])
    assert [r.text for r in out2] == [r.text for r in out] and all(r.cached for r in out2)
    assert len(state.hits) == n_hits and b2.usage()["cached"] == 9


def test_persistent_errors_become_failures_without_leaking_the_key(servers):
    urls, state = servers
    b = backend(urls)
    out = b.chat_batch([req("always-500"), req("bad-request")])
    assert "gave up after 3 attempts" in out[0].error and "HTTP 500" in out[0].error
    assert "HTTP 400" in out[1].error
    assert len([1 for _, u in state.hits if u == "always-500"]) == 3   # max_retries + 1
    assert len([1 for _, u in state.hits if u == "bad-request"]) == 1  # 4xx: no retry
    assert all(KEY not in r.error for r in out)
    assert b.usage()["failed"] == 2


def test_connection_refused_is_retried_on_the_next_url(servers):
    urls, state = servers
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    s.close()  # nothing listens there now
    b = backend([dead, urls[0]], max_retries=1)
    out = b.chat_batch([req("p1"), req("p2")])
    assert all(r.ok for r in out)


def test_payload_carries_guided_decoding_reasoning_and_logprobs(servers):
    urls, state = servers
    b = backend(urls, reasoning_effort="high")
    schema = {"type": "object", "properties": {"a": {"type": "number"}}}
    b.chat_batch([req("j", json_schema=schema), req("c", choices=("1", "2"))])
    bodies = {bd["messages"][-1]["content"]: bd for bd in state.bodies}
    assert bodies["j"]["response_format"]["json_schema"]["schema"] == schema
    assert bodies["c"]["structured_outputs"] == {"choice": ["1", "2"]}
    assert bodies["j"]["reasoning_effort"] == "high" and bodies["j"]["model"] == "test/model"
    assert bodies["j"]["temperature"] == 0.7 and bodies["j"]["max_tokens"] == 32

    pre = L.ChatRequest(messages=[{"role": "user", "content": "pick"}, {"role": "assistant", "content": "\\boxed{"}])
    res = b.choice_logprobs([pre], options=("1", "2"))[0]
    assert res.logprobs == {"1": -2.5, "2": -0.1}
    assert res.text == "\\boxed{2"  # the whole assistant message, prefill included
    body = state.bodies[-1]
    assert body["continue_final_message"] is True and body["max_tokens"] == 1 and body["logprobs"] is True


def test_no_base_url_is_a_clear_error():
    with pytest.raises(L.LLMError, match="base_urls"):
        backend([])
