"""The LLM response cache's cost per call against its size (prints numbers; not a test).

    python benchmarks/bench_cache_growth.py [--sizes 10000 100000 400000] [--payload 1500] [--calls 20000]

For each size: a fresh cache file is filled with that many answers (``--payload`` characters each,
random keys, not timed), reopened, and then ``--calls`` new requests are served the way
``Backend.chat_batch`` serves them: a lookup that misses, then the answer is stored (written in
groups of ``flush_every``); then as many lookups that hit. Reported: CPU microseconds per missed
lookup + store and per hit, and the file's size. A cost that rises with the size is what a
1.5-million-judgment tournament would feel at its end.
"""
from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from saber_lib.llm.cache import ResponseCache  # noqa: E402
from saber_lib.llm.types import ChatResult  # noqa: E402


def _key(i: int) -> str:
    return hashlib.sha256(f"request {i}".encode()).hexdigest()


def one(size: int, payload: int, calls: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cache.sqlite"
        c = ResponseCache(path, flush_every=4096)
        text = "x" * payload
        for i in range(size):
            c.put(_key(i), "m", ChatResult(text=text + str(i)))
        c.close()
        c = ResponseCache(path)
        t0 = time.process_time()
        for i in range(size, size + calls):
            k = _key(i)
            assert c.get(k) is None
            c.put(k, "m", ChatResult(text=text + str(i)))
        c.flush()
        miss = time.process_time() - t0
        probe = [_key(i * 7919 % (size + calls)) for i in range(calls)]
        t0 = time.process_time()
        for k in probe:
            assert c.get(k) is not None
        hit = time.process_time() - t0
        c.close()
        return {"size": size, "miss_put_us": 1e6 * miss / calls, "hit_us": 1e6 * hit / calls,
                "file_mb": path.stat().st_size / 2**20}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 400_000])
    ap.add_argument("--payload", type=int, default=1500)
    ap.add_argument("--calls", type=int, default=20_000)
    a = ap.parse_args(argv)
    print(f"{'answers in cache':>16} {'miss+store us/call':>19} {'hit us/call':>12} {'file MB':>8}")
    for s in a.sizes:
        r = one(s, a.payload, a.calls)
        print(f"{r['size']:>16,} {r['miss_put_us']:>19.1f} {r['hit_us']:>12.1f} {r['file_mb']:>8.0f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
