"""All-pairs signals: pairs/s/core, peak memory and bytes stored at several corpus sizes.

    python benchmarks/bench_pairs.py [--sizes 5000 10000 18000] [--workers 2] [--budget-mb 2048]
    python benchmarks/bench_pairs.py --run-dir runs/demo     # real topics + summaries of a run

Synthetic inputs (when no run directory is given) have realistic sizes: 1-6 topics per problem
drawn from ~3,000 used topics clustered by domain, a Lin matrix with high values inside a
domain, and 5-20 summary tokens per problem drawn from a Zipf law over an 8,000-word vocabulary.
Peak memory is the maximum resident set size of this process and of its workers (ru_maxrss).
pairs/s/core divides wall-clock throughput by the workers; pairs/cpu_s divides by the CPU seconds
actually used (the fair per-core figure on a machine shared with other jobs). A pair's cost grows
with |A| x |B| (BMA looks at every topic pair), so evals/cpu_s (topic-pair evaluations,
sum of |A| x |B| over the pairs, per CPU second) is the unit that compares corpora with different
topic-set sizes. ``--run-dir`` uses a run's real inputs (topic sets, Lin matrix, summary tokens).
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from saber_lib.signals import pairs  # noqa: E402


def synthetic(n: int, seed: int = 0, n_topics: int = 3000, vocab: int = 8000):
    rng = np.random.default_rng(seed)
    dom = rng.integers(0, 5, n_topics)
    sub = rng.integers(0, 60, n_topics)                     # ~50 topics per (domain, subarea)
    lin = rng.uniform(0.0, 0.1, (n_topics, n_topics))       # different domains: LCA near the root
    same = dom[:, None] == dom[None, :]
    lin[same] = rng.uniform(0.1, 0.4, same.sum())
    close = same & (sub[:, None] == sub[None, :])
    lin[close] = rng.uniform(0.5, 0.95, close.sum())
    lin = np.triu(lin, 1)
    lin = lin + lin.T
    np.fill_diagonal(lin, 1.0)
    by_dom = [np.flatnonzero(dom == d) for d in range(5)]
    words = np.array([f"w{i}" for i in range(vocab)])
    pw = 1.0 / (np.arange(vocab) + 20.0)
    pw /= pw.sum()
    topics, tokens = [], []
    for _ in range(n):
        d = rng.integers(0, 5)
        k = rng.integers(1, 7)
        topics.append(rng.choice(by_dom[d], size=k, replace=False).tolist())
        t = rng.choice(vocab, size=rng.integers(5, 21), p=pw)
        tokens.append(frozenset(words[t].tolist()))
    return tokens, topics, lin


def from_run(run_dir: Path):  # pragma: no cover - needs a run
    """A run's topic sets with the real Lin matrix over its used topics (IC from its annotations), and
    its summary tokens: the signals stage's own inputs."""
    import polars as pl

    from saber_lib.ontology.tree import ontology_from_nodes
    from saber_lib.signals import summary_tokens
    from saber_lib.signals.topic import topic_sets

    summ = pl.read_parquet(run_dir / "summaries" / "summaries.parquet")
    top = pl.read_parquet(run_dir / "topics" / "topics.parquet")
    df = top.join(summ, on="doc_id", how="inner")
    nodes = [[] if f else list(ns or []) for ns, f in zip(df["node_ids"].to_list(), df["failed"].to_list())]
    ts = topic_sets(ontology_from_nodes(run_dir / "ontology" / "nodes.parquet"), nodes)
    return ([summary_tokens(t) for t in df["summary_text"].to_list()],
            [ts.sets.idx[i, :ts.sets.size[i]].tolist() for i in range(len(nodes))], ts.lin)


def cpu_s() -> float:
    """CPU seconds of this process and its finished workers (robust to a shared, busy machine)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def peak_mb() -> tuple[float, float]:
    me = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return me, kids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[5000, 10000, 18000])
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--budget-mb", type=int, default=2048)
    ap.add_argument("--bins", type=int, default=100)
    ap.add_argument("--floor-topic", type=float, default=0.5)
    ap.add_argument("--floor-summ", type=float, default=0.1)
    ap.add_argument("--run-dir", type=Path, default=None)
    args = ap.parse_args()
    print(f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f} at the start; "
          + (f"real topic sets of {args.run_dir}" if args.run_dir else "synthetic reference corpora"))
    print(f"{'N':>7} {'workers':>7} {'pairs':>12} {'topic evals':>12} {'wall_s':>8} {'pairs/s':>10} {'pairs/s/core':>12} "
          f"{'pairs/cpu_s':>11} {'evals/cpu_s':>11} {'|A| mean/max':>12} {'stored':>11} {'MB_disk':>8} {'B/pair':>7} "
          f"{'peak_MB(main/worker)':>22}")
    sets = [from_run(args.run_dir)] if args.run_dir else [synthetic(n) for n in args.sizes]
    for tokens, topics, lin in sets:
        n = len(tokens)
        inp = pairs.build_inputs(tokens, topics, lin, hist_bins=args.bins, floor_topic=args.floor_topic,
                                 floor_summ=args.floor_summ)
        ex = pairs.LocalProcessExecutor(args.workers)
        with tempfile.TemporaryDirectory() as d:
            c0 = cpu_s()
            t0 = time.perf_counter()
            st = pairs.compute_all_pairs(inp, d, [str(i) for i in range(n)], executor=ex,
                                         memory_budget_mb=args.budget_mb)
            wall = time.perf_counter() - t0
        cpu = cpu_s() - c0
        me, kids = peak_mb()
        ev = inp.topic_pair_evaluations()
        sizes = f"{inp.n_topics.mean():.2f}/{inp.n_topics.max()}"
        print(f"{n:>7} {st.workers:>7} {st.n_pairs:>12,} {ev:>12.3g} {wall:>8.1f} {st.n_pairs / wall:>10.3g} "
              f"{st.n_pairs / wall / st.workers:>12.3g} {st.n_pairs / cpu:>11.3g} {ev / cpu:>11.3g} {sizes:>12} "
              f"{st.n_stored:>11,} {st.bytes_on_disk / 2**20:>8.1f} "
              f"{st.bytes_on_disk / max(1, st.n_pairs):>7.3f} {me:>10.0f}/{kids:<10.0f}  "
              f"(block {st.block} x tile {st.col_tile})", flush=True)


if __name__ == "__main__":
    main()
