"""Dedup speed and memory on the real corpus (all nine sources, ~18K records).

    python benchmarks/bench_dedup.py [--params params/paper.yaml] [--data-dir DIR] [--repeat 3]

Prints records/s for the whole dedup (exact within source + MinHash-LSH near duplicates across
sources) and for its parts (tokenize + shingle, MinHash signatures), the peak Python allocation
during one more, untimed dedup (tracemalloc) and the peak resident set size of the process (ru_maxrss).
Loading the sources is timed separately and not counted in the dedup rate.
"""
from __future__ import annotations

import argparse
import resource
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from saber_lib.core.config import load_profile  # noqa: E402
from saber_lib.corpus import dedup, load_source  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params/paper.yaml")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    p = load_profile(args.params).section("corpus")
    b, r, k, seed, thr = (p["minhash_bands"], p["minhash_rows"], p["shingle_size"], p["minhash_seed"],
                          p["near_dup_threshold"])

    t0 = time.perf_counter()
    records = [rec for s in p["sources"] for rec in load_source(s, args.data_dir).records]
    load_s = time.perf_counter() - t0
    n = len(records)
    print(f"loaded {n} records from {len(p['sources'])} sources in {load_s:.2f} s")
    print(f"params: {b} bands x {r} rows (num_perm {b * r}), word {k}-grams, threshold {thr}, "
          f"number check {p['near_dup_number_check']}")

    best = {"tokenize+shingle": float("inf"), "minhash": float("inf"), "dedup total": float("inf")}
    removed = None
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        sets = [dedup.shingles(dedup.tokens(dedup.dedup_text(x)), k) for x in records]
        best["tokenize+shingle"] = min(best["tokenize+shingle"], time.perf_counter() - t0)
        t0 = time.perf_counter()
        dedup.minhashes(sets, b * r, seed)
        best["minhash"] = min(best["minhash"], time.perf_counter() - t0)
        del sets

        t0 = time.perf_counter()
        ex = dedup.exact_within_source(records)
        kept = [x for x, keep in zip(records, ex.keep) if keep]
        near = dedup.near_cross_source(kept, p["sources"], k, b, r, seed, thr, p["near_dup_number_check"])
        best["dedup total"] = min(best["dedup total"], time.perf_counter() - t0)
        removed = (len(ex.log), len(near.log), near.candidate_pairs)

    # memory in a separate pass: tracemalloc slows Python down several times
    tracemalloc.start()
    ex = dedup.exact_within_source(records)
    kept = [x for x, keep in zip(records, ex.keep) if keep]
    dedup.near_cross_source(kept, p["sources"], k, b, r, seed, thr, p["near_dup_number_check"])
    peak_py = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()

    for name, secs in best.items():
        print(f"{name:>18}: {secs:7.2f} s  {n / secs:10.0f} records/s  (best of {args.repeat})")
    print(f"removed: {removed[0]} exact, {removed[1]} near (of {removed[2]} LSH candidate pairs)")
    print(f"peak Python allocation during dedup: {peak_py / 2**20:.0f} MiB (tracemalloc)")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"peak resident set size of the process: {rss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
