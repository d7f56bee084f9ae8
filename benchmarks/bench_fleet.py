"""The openai backend against a fleet of loopback mock servers: calls/s against servers x concurrency.

    python benchmarks/bench_fleet.py [--servers 1 2 4 8] [--concurrency 16 64] [--latency 8.0] [--rounds 3]

Each mock server (``saber_lib.llm.mock_server``, 127.0.0.1 only, in a separate process so that the
client's CPU is measured alone) answers after ``--latency`` seconds and serves at most
``--concurrency`` requests at once. The client is the workbench's ``openai`` backend with
``llm.server_concurrency`` = the servers' limit and its SQLite cache, asked ``rounds x servers x
concurrency`` distinct calls (after one untimed warm-up round that opens the connections). Ideal calls/s = servers x concurrency / latency. Reported: calls/s,
its share of the ideal, the client's CPU milliseconds per call (all its threads), and the fewest
requests any server had in flight at once (= its limit when the client keeps it full).
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from saber_lib import llm as L  # noqa: E402
from saber_lib.llm.mock_server import MockChatServer  # noqa: E402


def serve(n: int, latency: float, limit: int, conn) -> None:
    srvs = [MockChatServer(latency_s=latency, limit=limit) for _ in range(n)]
    conn.send([s.url for s in srvs])
    conn.recv()   # "stop"
    conn.send([(s.max_in_flight, sum(v for k, v in s.answered.items() if not k.startswith("warm-up"))) for s in srvs])
    for s in srvs:
        s.stop()


def one(n: int, c: int, latency: float, rounds: int) -> dict:
    parent, child = mp.Pipe()
    proc = mp.get_context("fork").Process(target=serve, args=(n, latency, c, child), daemon=True)
    proc.start()
    urls = parent.recv()
    calls = rounds * n * c
    with tempfile.TemporaryDirectory() as tmp:
        cfg = {"backend": "openai", "model": "bench/fleet", "base_urls": urls, "api_key_env": "SABER_NO_KEY",
               "max_concurrency": c, "server_concurrency": c, "server_retry_s": 30.0, "timeout_s": 60.0,
               "max_retries": 2, "retry_backoff_s": 0.1, "temperature": 0.0, "max_tokens": 8,
               "reasoning_effort": None}
        b = L.make_backend(cfg, Path(tmp) / "cache.sqlite", progress=False)
        reqs = [L.ChatRequest(messages=[{"role": "user", "content": f"bench {n}x{c} call {i}"}])
                for i in range(calls)]
        # warm-up round (not timed): opens the servers x concurrency keep-alive connections once, as
        # the first calls of a stage do; the timed rounds measure the steady state
        b.chat_batch([L.ChatRequest(messages=[{"role": "user", "content": f"warm-up {i}"}]) for i in range(n * c)])
        cpu0, t0 = time.process_time(), time.perf_counter()
        out = b.chat_batch(reqs)
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        b.close()
    parent.send("stop")
    stats = parent.recv()
    proc.join(5)
    ok = sum(r.ok for r in out)
    ideal = n * c / latency
    return {"servers": n, "conc": c, "calls": calls, "ok": ok, "wall_s": wall, "calls_s": calls / wall,
            "ideal": ideal, "pct": 100 * calls / wall / ideal, "cpu_ms": 1000 * cpu / calls,
            "min_inflight": min(m for m, _ in stats), "answered": sum(a for _, a in stats)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--servers", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--concurrency", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--latency", type=float, default=8.0)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    print(f"mock latency {args.latency} s, {args.rounds} rounds of servers x concurrency calls each")
    print(f"{'servers':>7} {'conc':>5} {'calls':>6} {'wall s':>7} {'calls/s':>8} {'ideal':>7} {'% ideal':>8} "
          f"{'client CPU ms/call':>19} {'min in flight':>14}")
    worst = 100.0
    for n in args.servers:
        for c in args.concurrency:
            r = one(n, c, args.latency, args.rounds)
            assert r["ok"] == r["calls"] == r["answered"], r
            worst = min(worst, r["pct"])
            print(f"{r['servers']:>7} {r['conc']:>5} {r['calls']:>6} {r['wall_s']:>7.2f} {r['calls_s']:>8.1f} "
                  f"{r['ideal']:>7.1f} {r['pct']:>7.1f}% {r['cpu_ms']:>19.2f} {r['min_inflight']:>14}", flush=True)
    print(f"lowest share of the ideal: {worst:.1f}% (target >= 90%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
