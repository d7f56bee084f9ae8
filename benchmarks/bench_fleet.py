"""The openai backend against a fleet of loopback mock servers: calls/s against servers x concurrency.

    python benchmarks/bench_fleet.py [--servers 1 2 4 8] [--concurrency 16 64] [--latency 8.0]
        [--dist constant lognormal] [--rounds 3] [--flush-every 64]

Each mock server (``saber_lib.llm.mock_server``, 127.0.0.1 only, in a separate process so that the
client's CPU is measured alone) serves at most ``--concurrency`` requests at once. Latency:

* ``constant``: every answer after ``--latency`` seconds;
* ``lognormal``: an answer of ``n`` words takes ``n / rate`` seconds, ``n`` log-normal (median 200,
  sigma 0.6, cut at 800 as ``max_tokens`` does), and 3% of the requests (a slow tail: a long prefill, a preempted sequence) take 4 times longer;
  the rate is set so that the mean latency is about ``--latency`` (uncut). Each request's draw is seeded by its text.

The client is the workbench's ``openai`` backend (one asyncio loop thread for every call) with
``llm.server_concurrency`` = the servers' limit and its SQLite cache (``--flush-every``: answers per
cache write; 1 = one transaction per answer), asked ``rounds x servers x concurrency`` distinct calls
after one untimed warm-up round that opens the connections. The ideal wall time is that of a client
with no overhead: the same calls, in the same order, on the ``servers x concurrency`` slots, each
slot refilled the moment it frees (with a constant latency: ``rounds x latency``; with a slow tail it
also holds the drain at the end, which no client avoids without knowing latencies in advance).
Reported: calls/s, the ideal's share of the wall time, CPU milliseconds per call of the client
process (all its threads: the caller's, which writes the cache, and the HTTP loop's) and, apart, of
the servers' process over the same timed rounds, the fewest requests any server had in flight at
once (= its limit when the client keeps it full) and the slowest call.
"""
from __future__ import annotations

import argparse
import heapq
import multiprocessing as mp
import os
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from saber_lib import llm as L  # noqa: E402
from saber_lib.llm.mock_server import MockChatServer  # noqa: E402

SIGMA, TAIL_P, TAIL_X, CAP_WORDS = 0.6, 0.03, 4.0, 800


def latency_of(dist: str, mean_s: float):
    """``message -> (seconds, words)`` with the given mean latency."""
    if dist == "constant":
        return lambda user: (mean_s, 0)
    median_words = 200.0
    mean_words = median_words * np.exp(SIGMA ** 2 / 2) * (1 - TAIL_P + TAIL_P * TAIL_X)
    rate = mean_words / mean_s                                   # words per second

    def fn(user: str):
        rng = np.random.default_rng(zlib.crc32(user.encode()))
        words = min(int(round(median_words * np.exp(SIGMA * rng.standard_normal()))), CAP_WORDS)  # max_tokens
        slow = TAIL_X if rng.random() < TAIL_P else 1.0
        return words * slow / rate, words
    return fn


def ideal_schedule(latencies, slots: int) -> float:
    """Wall time of the calls in order on ``slots`` slots, each refilled the moment it frees."""
    free = [0.0] * slots
    for lat in latencies:
        heapq.heappush(free, heapq.heappop(free) + lat)
    return max(free)


def serve(n: int, dist: str, latency: float, limit: int, conn) -> None:
    srvs = [MockChatServer(limit=limit, latency_fn=latency_of(dist, latency)) for _ in range(n)]
    conn.send([s.url for s in srvs])
    conn.recv()   # "start": the timed rounds begin
    cpu0 = time.process_time()
    conn.recv()   # "stop"
    conn.send(time.process_time() - cpu0)
    conn.send([(s.max_in_flight, sum(v for k, v in s.answered.items() if not k.startswith("warm-up"))) for s in srvs])
    for s in srvs:
        s.stop()


def one(n: int, c: int, dist: str, latency: float, rounds: int, flush_every: int) -> dict:
    parent, child = mp.Pipe()
    proc = mp.get_context("fork").Process(target=serve, args=(n, dist, latency, c, child), daemon=True)
    proc.start()
    urls = parent.recv()
    calls = rounds * n * c
    with tempfile.TemporaryDirectory() as tmp:
        cfg = {"backend": "openai", "model": "bench/fleet", "base_urls": urls, "api_key_env": "SABER_NO_KEY",
               "max_concurrency": c, "server_concurrency": c, "server_retry_s": 30.0, "timeout_s": 600.0,
               "max_retries": 2, "retry_backoff_s": 0.1, "temperature": 0.0, "max_tokens": 8,
               "reasoning_effort": None, "cache_flush_every": flush_every}
        b = L.make_backend(cfg, Path(tmp) / "cache.sqlite", progress=False)
        texts = [f"bench {dist} {n}x{c} call {i}" for i in range(calls)]
        reqs = [L.ChatRequest(messages=[{"role": "user", "content": t}]) for t in texts]
        # warm-up round (not timed): opens the servers x concurrency keep-alive connections once, as
        # the first calls of a stage do; the timed rounds measure the steady state
        b.chat_batch([L.ChatRequest(messages=[{"role": "user", "content": f"warm-up {i}"}]) for i in range(n * c)])
        parent.send("start")
        cpu0, t0 = time.process_time(), time.perf_counter()
        out = b.chat_batch(reqs)
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        parent.send("stop")
        server_cpu = parent.recv()
        b.close()
    stats = parent.recv()
    proc.join(5)
    lat = [latency_of(dist, latency)(t)[0] for t in texts]
    ideal_wall = ideal_schedule(lat, n * c)
    return {"servers": n, "conc": c, "calls": calls, "ok": sum(r.ok for r in out), "wall_s": wall,
            "calls_s": calls / wall, "ideal_s": ideal_wall, "pct": 100 * ideal_wall / wall,
            "cpu_ms": 1000 * cpu / calls, "server_cpu_ms": 1000 * server_cpu / calls,
            "min_inflight": min(m for m, _ in stats),
            "answered": sum(a for _, a in stats), "mean_lat": float(np.mean(lat)), "max_lat": max(lat)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--servers", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--concurrency", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--latency", type=float, default=8.0, help="mean latency, seconds")
    ap.add_argument("--dist", nargs="+", default=["constant", "lognormal"], choices=["constant", "lognormal"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--flush-every", type=int, nargs="+", default=[64])
    args = ap.parse_args(argv)
    print(f"mean latency {args.latency} s, {args.rounds} rounds of servers x concurrency calls each; "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f} at the start")
    print(f"{'latency':>9} {'flush':>5} {'servers':>7} {'conc':>5} {'calls':>6} {'wall s':>7} {'ideal s':>7} "
          f"{'calls/s':>8} {'% ideal':>8} {'client CPU ms/call':>19} {'server CPU ms/call':>19} {'min in flight':>14} {'mean lat s':>10} {'max lat s':>9}")
    worst, worst_cpu = 100.0, 0.0
    for dist in args.dist:
        for n in args.servers:
            for c in args.concurrency:
                for fe in args.flush_every:
                    r = one(n, c, dist, args.latency, args.rounds, fe)
                    assert r["ok"] == r["calls"] == r["answered"], r
                    worst, worst_cpu = min(worst, r["pct"]), max(worst_cpu, r["cpu_ms"])
                    print(f"{dist:>9} {fe:>5} {r['servers']:>7} {r['conc']:>5} {r['calls']:>6} {r['wall_s']:>7.2f} "
                          f"{r['ideal_s']:>7.2f} {r['calls_s']:>8.1f} {r['pct']:>7.1f}% {r['cpu_ms']:>19.2f} "
                          f"{r['server_cpu_ms']:>19.2f} {r['min_inflight']:>14} {r['mean_lat']:>10.2f} {r['max_lat']:>9.1f}", flush=True)
    print(f"lowest share of the ideal: {worst:.1f}% (target >= 90%); highest client CPU: {worst_cpu:.2f} ms/call "
          f"(target <= 1); load {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
