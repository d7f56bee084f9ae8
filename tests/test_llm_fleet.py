"""The openai backend against a fleet of loopback servers (saber_lib.llm.mock_server): per-server
concurrency limits are filled, a server that dies mid-run leaves the rotation and comes back after
``server_retry_s``, and every call is answered exactly once (server-side counts and the cache)."""
import threading
import time
from collections import Counter

import pytest

from saber_lib import llm as L
from saber_lib.llm.fleet import Fleet
from saber_lib.llm.mock_server import MockChatServer


def backend(urls, cache_path=None, **over):
    cfg = {"backend": "openai", "model": "test/fleet", "base_urls": urls, "api_key_env": "SABER_NO_KEY",
           "max_concurrency": 8, "timeout_s": 10.0, "max_retries": 2, "retry_backoff_s": 0.01,
           "temperature": 0.0, "max_tokens": 8, "reasoning_effort": None, "server_concurrency": 4,
           "server_retry_s": 0.3}
    cfg.update(over)
    return L.make_backend(cfg, cache_path, progress=False)


def req(text):
    return L.ChatRequest(messages=[{"role": "user", "content": text}])


def test_fleet_picks_least_busy_up_server_and_probes_a_dead_one():
    now = [0.0]
    f = Fleet(2, 2, retry_s=5.0, clock=lambda: now[0])
    assert [f.acquire() for _ in range(4)] == [0, 1, 0, 1]
    f.release(1, answered=False)                  # server 1 gave no answer: out for 5 s
    f.release(1, answered=False)
    f.release(0, answered=True)
    assert f.acquire() == 0 and not f.any_up(but=0)
    now[0] = 6.0                                   # back: one probe call only
    assert f.acquire() == 1
    f.release(0, answered=True)
    f.release(0, answered=True)
    assert f.acquire() == 0 and f.acquire() == 0 and f.state()[1]["busy"] == 1
    f.release(1, answered=True)                    # the probe answered: all its slots again
    assert f.acquire() == 1 and f.acquire() == 1


def test_three_servers_one_dies_mid_run_every_call_exactly_once(tmp_path):
    srvs = [MockChatServer(latency_s=0.05, limit=4) for _ in range(3)]
    n = 300
    texts = [f"problem {i}" for i in range(n)]
    b = backend([s.url for s in srvs], tmp_path / "cache.sqlite")
    events = {}

    def chaos():   # server 1 dies after 60 answers and comes back 1 s later
        while sum(s.answered.total() for s in srvs) < 60:
            time.sleep(0.005)
        srvs[1].die()
        events["died_at"] = srvs[1].answered.total()
        time.sleep(1.0)
        srvs[1].revive()
        events["revived"] = True

    th = threading.Thread(target=chaos, daemon=True)
    th.start()
    try:
        out = b.chat_batch([req(t) for t in texts])
        th.join(5)
        assert events.get("revived")
        assert all(r.ok for r in out), [r.error for r in out if not r.ok][:3]
        assert [r.text for r in out] == [f"echo:{t}" for t in texts]
        answered = sum((s.answered for s in srvs), start=Counter())
        assert set(answered) == set(texts) and set(answered.values()) == {1}   # each exactly once
        assert all(s.max_in_flight <= 4 for s in srvs)
        assert srvs[1].answered.total() > events["died_at"], "the revived server is back in the rotation"
        assert b.usage()["calls"] == n and b.usage()["failed"] == 0
        assert b.describe()["llm_servers"][1]["failures"] >= 1
        # the cache holds every call: a second client makes no request at all
        before = sum(s.received.total() for s in srvs)
        b2 = backend([s.url for s in srvs], tmp_path / "cache.sqlite")
        again = b2.chat_batch([req(t) for t in texts])
        assert all(r.cached for r in again) and [r.text for r in again] == [r.text for r in out]
        assert sum(s.received.total() for s in srvs) == before and b2.usage()["cached"] == n
    finally:
        for s in srvs:
            s.stop()


def test_every_server_kept_at_its_limit():
    srvs = [MockChatServer(latency_s=0.2, limit=8) for _ in range(3)]
    try:
        b = backend([s.url for s in srvs], server_concurrency=8)
        assert b.threads == 24
        b.chat_batch([req(f"q{i}") for i in range(96)])
        assert [s.max_in_flight for s in srvs] == [8, 8, 8]
        assert [s.answered.total() for s in srvs] == [32, 32, 32]
    finally:
        for s in srvs:
            s.stop()


@pytest.mark.parametrize("over", [{"server_concurrency": 0, "max_concurrency": 6}])
def test_shared_concurrency_when_per_server_is_unset(over):
    srvs = [MockChatServer(latency_s=0.1) for _ in range(2)]
    try:
        b = backend([s.url for s in srvs], **over)
        assert b.threads == 6
        b.chat_batch([req(f"q{i}") for i in range(30)])
        assert sum(s.max_in_flight for s in srvs) <= 6 and min(s.answered.total() for s in srvs) >= 10
    finally:
        for s in srvs:
            s.stop()


def test_a_fleet_entirely_down_fails_fast_instead_of_waiting():
    now = [0.0]
    f = Fleet(2, 1, retry_s=30.0, clock=lambda: now[0])
    a, b = f.acquire(), f.acquire()
    f.release(a, answered=False)
    f.release(b, answered=False)
    assert f.acquire() is None          # both out of the rotation: no 30 s wait
    now[0] = 31.0
    assert f.acquire() in (0, 1)        # back for a probe after retry_s
