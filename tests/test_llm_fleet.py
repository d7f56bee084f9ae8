"""The openai backend against a fleet of loopback servers (saber_lib.llm.mock_server): per-server
concurrency limits are filled, a server that dies mid-run leaves the rotation and comes back after
``server_retry_s``, and every call is answered exactly once (server-side counts and the cache)."""
import asyncio
import gc
import subprocess
import sys
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
    assert [f.pick() for _ in range(4)] == [0, 1, 0, 1]
    assert f.pick() is None                        # every slot taken
    f.release(1, answered=False)                  # server 1 gave no answer: out for 5 s
    f.release(1, answered=False)
    f.release(0, answered=True)
    assert f.pick() == 0 and not f.any_up(but=0)
    now[0] = 6.0                                   # back: one probe call only
    assert f.pick() == 1
    f.release(0, answered=True)
    f.release(0, answered=True)
    assert f.pick() == 0 and f.pick() == 0 and f.state()[1]["busy"] == 1
    assert f.pick() is None                        # server 0 full, server 1 probing
    f.release(1, answered=True)                    # the probe answered: all its slots again
    assert f.pick() == 1 and f.pick() == 1


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
        assert b.slots == 24
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
        assert b.slots == 6
        b.chat_batch([req(f"q{i}") for i in range(30)])
        assert sum(s.max_in_flight for s in srvs) <= 6 and min(s.answered.total() for s in srvs) >= 10
    finally:
        for s in srvs:
            s.stop()


def test_a_fleet_entirely_down_fails_fast_instead_of_waiting():
    now = [0.0]
    f = Fleet(2, 1, retry_s=30.0, clock=lambda: now[0])
    a, b = f.pick(), f.pick()
    f.release(a, answered=False)
    f.release(b, answered=False)
    assert asyncio.run(f.acquire()) is None   # both out of the rotation: no 30 s wait
    now[0] = 31.0
    assert asyncio.run(f.acquire()) in (0, 1)  # back for a probe after retry_s


def test_a_waiting_acquire_wakes_on_a_release_and_when_a_server_comes_back():
    async def scenario():
        f = Fleet(2, 1, retry_s=0.15)
        a, b = f.pick(), f.pick()
        waiter = asyncio.ensure_future(f.acquire())
        await asyncio.sleep(0.05)
        assert not waiter.done()                   # both slots taken: it waits
        f.release(b, answered=True)
        assert await asyncio.wait_for(waiter, 1.0) == b
        f.release(a, answered=False)               # server a out for 0.15 s, b busy again
        t0 = time.monotonic()
        got = await asyncio.wait_for(f.acquire(), 2.0)   # nothing released: woken by a's return
        return got, a, time.monotonic() - t0

    got, a, waited = asyncio.run(scenario())
    assert got == a and 0.1 <= waited < 1.5


def loop_threads():
    return [t for t in threading.enumerate() if t.name == "saber-llm-http" and t.is_alive()]


class InterruptedCache(L.ResponseCache):
    """A cache whose third write raises, as an interrupt in the caller's thread would."""

    def put(self, key, model, res):
        self.puts = getattr(self, "puts", 0) + 1
        if self.puts == 3:
            raise KeyboardInterrupt("interrupted")
        super().put(key, model, res)


def test_one_loop_thread_results_in_request_order_and_an_interrupted_batch_stops_its_calls(tmp_path):
    # answers come back in reverse order of the requests (later requests are faster)
    others = set(loop_threads())   # backends of earlier tests in this process may still hold theirs

    def mine():
        return [t for t in loop_threads() if t not in others]

    srv = MockChatServer(limit=8, latency_fn=lambda user: (0.02 * (20 - int(user[1:])) if user.startswith("r") else 0.3, 0))
    try:
        b = backend([srv.url], tmp_path / "c.sqlite", server_concurrency=8)
        texts = [f"r{i}" for i in range(20)]
        out = b.chat_batch([req(t) for t in texts])
        assert [r.text for r in out] == [f"echo:{t}" for t in texts]
        assert len(mine()) == 1            # 8 calls at once, one client thread for all of them
        assert srv.max_in_flight == 8

        b.cache = InterruptedCache(tmp_path / "c.sqlite", flush_every=64)
        with pytest.raises(KeyboardInterrupt):
            b.chat_batch([req(f"slow {i}") for i in range(40)])   # 0.3 s each, 8 at once
        time.sleep(0.5)
        sent = srv.received.total()
        time.sleep(0.5)
        assert srv.received.total() == sent < 20 + 40        # no call of the batch goes on after it
        assert all(s["busy"] == 0 for s in b.fleet.state())  # every slot given back
        assert b.fleet.state()[0]["failures"] == 0           # the cancelled calls are not the server's fault
        cache = L.ResponseCache(tmp_path / "c.sqlite")
        kept = [i for i in range(40) if cache.get(b.cache_key(req(f"slow {i}"))) is not None]
        assert len(kept) == 2                                 # the answers put before the interrupt are kept
        b.cache = cache
        again = b.chat_batch([req(f"slow {i}") for i in range(12)])   # the backend goes on working
        assert all(r.ok for r in again) and sum(r.cached for r in again) == len([i for i in kept if i < 12])
        b.close()
        assert mine() == []
        dropped = backend([srv.url], server_concurrency=2)
        dropped.chat_batch([req("r19")])
        assert len(mine()) == 1
        del dropped
        gc.collect()                                          # a dropped backend stops its loop thread
        assert mine() == []
    finally:
        srv.stop()


KILLED_CLIENT = """
import os, sys
from saber_lib import llm as L
url, db, done_file = sys.argv[1:4]
cfg = {"backend": "openai", "model": "test/kill", "base_urls": [url], "api_key_env": "SABER_NO_KEY",
       "server_concurrency": 4, "timeout_s": 60.0, "max_retries": 0, "temperature": 0.0, "max_tokens": 8,
       "reasoning_effort": None, "cache_flush_every": 8, "cache_flush_s": 3600.0}
b = L.make_backend(cfg, db, progress=False)
for r in range(4):
    out = b.chat_batch([L.ChatRequest(messages=[{"role": "user", "content": f"r{r} q{j}"}]) for j in range(20)])
    assert all(x.ok for x in out)
    with open(done_file, "a") as f:         # the caller marks the round done once chat_batch returned
        f.write(f"{r}\\n")
        f.flush()
        os.fsync(f.fileno())
"""


def test_openai_client_killed_mid_batch_loses_no_answer_marked_done(tmp_path):
    """SIGKILL of a client with 4 calls in flight: every round it marked done is stored, a rerun asks
    only what is not stored, and in the end every request was answered and stored."""
    hang = {"on": True}
    srv = MockChatServer(limit=4, latency_fn=lambda user: (30.0 if hang["on"] and user == "r2 q13" else 0.01, 0))
    db, done = tmp_path / "llm_cache.sqlite", tmp_path / "done.txt"
    cmd = [sys.executable, "-c", KILLED_CLIENT, srv.url, str(db), str(done)]
    try:
        p = subprocess.Popen(cmd)
        try:
            deadline = time.monotonic() + 60
            while srv.answered.total() < 2 * 20 + 19 and time.monotonic() < deadline:   # all of round 2 but q13
                time.sleep(0.01)
            time.sleep(0.2)
        finally:
            p.kill()                                 # SIGKILL: no finally block, no flush
            p.wait(timeout=30)
        assert done.read_text().split() == ["0", "1"]
        probe = backend([srv.url])
        probe.model_id = "test/kill"
        cache = L.ResponseCache(db)
        stored = {f"r{r} q{j}" for r in range(4) for j in range(20)
                  if cache.get(probe.cache_key(req(f"r{r} q{j}"))) is not None}
        cache.close()
        round2 = {t for t in stored if t.startswith("r2")}
        assert {f"r{r} q{j}" for r in (0, 1) for j in range(20)} <= stored    # marked done -> stored
        assert len(round2) % 8 == 0 and "r2 q13" not in round2               # whole groups of 8 only
        hang["on"] = False
        asked_before = Counter(srv.received)
        subprocess.run(cmd, timeout=120, check=True)
        asked_again = srv.received - asked_before
        assert set(asked_again) == {f"r{r} q{j}" for r in (2, 3) for j in range(20)} - round2
        assert set(asked_again.values()) == {1}
        assert done.read_text().split() == ["0", "1", "0", "1", "2", "3"]
        final = L.ResponseCache(db)
        assert all(final.get(probe.cache_key(req(f"r{r} q{j}"))) is not None for r in range(4) for j in range(20))
    finally:
        srv.stop()
