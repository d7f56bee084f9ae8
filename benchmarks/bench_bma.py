"""BMA throughput: pairs/s of ``bma_block`` (tiles) and ``bma_many`` (aligned pairs).

Synthetic topic sets by default (U topics in use, set sizes 0..max_topics, topic ids Zipf-distributed
like real annotations, or uniform = the worst case for the tile's sub-matrix); or real ones from a
run: ``--run-dir runs/demo`` reads ``ontology/nodes.parquet`` and ``topics/topics.parquet``.

    python benchmarks/bench_bma.py [--n 4096] [--tile 1024] [--topics 4000] [--run-dir DIR]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from saber_lib.signals.topic import bma, bma_block, bma_many, pad_sets, topic_sets


def synthetic(n, U, max_topics, dist, rng):
    X = rng.random((U, U)).astype(np.float32)
    lin = (X + X.T) / 2
    np.fill_diagonal(lin, 1.0)
    sets = []
    for _ in range(n):
        k = int(rng.integers(0, max_topics + 1))
        ids = (rng.zipf(1.3, size=k) - 1) % U if dist == "zipf" else rng.choice(U, size=k, replace=False)
        sets.append(sorted(set(int(x) for x in ids)))
    return lin, pad_sets(sets)


def real(run_dir):
    import polars as pl

    from saber_lib.ontology.tree import ontology_from_nodes

    o = ontology_from_nodes(pl.read_parquet(f"{run_dir}/ontology/nodes.parquet"))
    t = pl.read_parquet(f"{run_dir}/topics/topics.parquet")
    ts = topic_sets(o, t["node_ids"].to_list())
    return ts.lin, ts.sets


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=4096, help="problems (synthetic)")
    ap.add_argument("--topics", type=int, default=4000, help="distinct topics in use (synthetic)")
    ap.add_argument("--max-topics", type=int, default=6)
    ap.add_argument("--dist", choices=("zipf", "uniform"), default="zipf")
    ap.add_argument("--tile", type=int, default=1024)
    ap.add_argument("--run-dir", default=None)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    lin, sets = real(a.run_dir) if a.run_dir else synthetic(a.n, a.topics, a.max_topics, a.dist, rng)
    n = len(sets)
    print(f"problems {n}, topics in use {lin.shape[0]}, mean set size {sets.size.mean():.2f}, "
          f"max {sets.size.max()}")
    # correctness spot check against the scalar definition
    i, j = rng.integers(0, n, size=2)
    a_, b_ = sets.idx[i, :sets.size[i]], sets.idx[j, :sets.size[j]]
    ref = bma(lin[np.ix_(a_, b_)]) if len(a_) and len(b_) else 0.0
    assert abs(bma_block(lin, sets[i:i + 1], sets[j:j + 1])[0, 0] - ref) < 1e-5

    t = a.tile
    bma_block(lin, sets[:t], sets[:t])                       # warm-up (page in the Lin matrix)
    pairs, t0, c0 = 0, time.perf_counter(), time.process_time()
    for r in range(0, n, t):
        for c in range(r, n, t):   # upper triangle of tiles, as the all-pairs pass does
            out = bma_block(lin, sets[r:r + t], sets[c:c + t])
            pairs += out.size
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    print(f"bma_block  tile {t}: {pairs:,} pairs, wall {dt:.2f} s = {pairs / dt:,.0f} pairs/s; "
          f"cpu {dc:.2f} s = {pairs / dc:,.0f} pairs/cpu-s (1 process)")

    m = min(200_000, n * 50)
    ia, ib = rng.integers(0, n, size=m), rng.integers(0, n, size=m)
    t0, c0 = time.perf_counter(), time.process_time()
    bma_many(lin, sets.take(ia), sets.take(ib))
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    print(f"bma_many  aligned: {m:,} pairs, wall {dt:.2f} s = {m / dt:,.0f} pairs/s; "
          f"cpu {dc:.2f} s = {m / dc:,.0f} pairs/cpu-s")


if __name__ == "__main__":
    main()
