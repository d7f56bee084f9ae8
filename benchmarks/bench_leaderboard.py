"""Leaderboard statistics on a synthetic 50 systems x 1,000 queries case: wall time of the
bootstrap intervals (overall + 5 domains) and of the pairwise tests (1,225 pairs: sign-flip
p-values, paired bootstrap intervals, Holm).

    python benchmarks/bench_leaderboard.py [--systems 50] [--queries 1000] [--resamples 10000]

Synthetic scores: per-query difficulty shared by all systems plus a system effect and noise,
clipped to [0, 1]; 2% of one system's queries unscored (a second missing-query pattern).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from saber_lib.leaderboard import published as pub  # noqa: E402
from saber_lib.leaderboard import report  # noqa: E402


def synthetic(n_sys: int, n_q: int, seed: int = 0, tasks=("statement-full",)):
    """``n_sys`` systems scored on ``n_q`` queries for each of ``tasks`` (the first task's scores
    do not depend on how many tasks follow: each further task draws its own noise afterwards)."""
    rng = np.random.default_rng(seed)
    difficulty = rng.beta(2, 2, n_q)
    effect = np.sort(rng.normal(0, 0.05, n_sys))[::-1]
    missing = None
    scores = []
    for _ in tasks:
        X = np.clip(difficulty[None, :] + effect[:, None] + rng.normal(0, 0.15, (n_sys, n_q)), 0, 1)
        if missing is None:
            missing = rng.choice(n_q, n_q // 50, replace=False)
        X[-1, missing] = np.nan
        scores.append(X)
    doms = [["Algebra", "Geometry", "Number Theory", "Combinatorics", "Calculus and Analysis"][i % 5]
            for i in range(n_q)]
    qids = [str(i) for i in range(n_q)]
    return [pub.System(f"sys{i:02d}", "synthetic", qids, [[d] for d in doms], {t: X[i] for t, X in zip(tasks, scores)})
            for i in range(n_sys)]


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--systems", type=int, default=50)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--resamples", type=int, default=10_000)
    a = ap.parse_args(argv)
    systems = synthetic(a.systems, a.queries)
    n_pairs = a.systems * (a.systems - 1) // 2
    t0 = time.perf_counter()
    lb = report.leaderboard_frame(systems, ["statement-full"], "correct", a.resamples, seed=0)
    t1 = time.perf_counter()
    pw = report.pairwise_frame(systems, ["statement-full"], a.resamples, seed=0)
    t2 = time.perf_counter()
    print(f"{a.systems} systems x {a.queries} queries, {a.resamples} resamples / sign draws")
    print(f"  bootstrap intervals ({lb.height} system-scope rows): {t1 - t0:6.2f} s")
    print(f"  pairwise tests ({n_pairs} pairs, sign-flip + paired bootstrap + Holm): {t2 - t1:6.2f} s")
    print(f"  total: {t2 - t0:6.2f} s; significant pairs (Holm 0.05): {report.n_significant(pw)}")


if __name__ == "__main__":
    main()
