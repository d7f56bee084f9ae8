"""Speed of the tournament kernels and the simulated inversion study (prints numbers; not a test).

    python benchmarks/bench_tournament.py [n_queries] [max_rounds]

Reports: a Swiss round and a Bradley-Terry fit at the paper's size (150 candidates, 1,500
comparisons); then the simulated study (150 candidates, judge agreement 0.78): mean inversions
against the all-pairs ranking at R = 20 for Swiss, random and adaptive, and the judgments each
needs to reach Swiss's R = 20 inversion count.
"""
import sys
import time

import numpy as np
import polars as pl

from saber_lib.studies import inversions
from saber_lib.judging.bradley_terry import fit_bradley_terry, single_thread_blas
from saber_lib.judging.schedules import swiss_round


def main(n_queries=50, max_rounds=30):
    n = 150
    rng = np.random.default_rng(0)
    with single_thread_blas():
        wins = rng.integers(0, 15, n)
        played = {frozenset(map(int, rng.choice(n, 2, replace=False))) for _ in range(1500)}
        t = time.perf_counter()
        for _ in range(20):
            swiss_round(wins, played, rng)
        print(f"swiss_round (n=150, 1,500 played pairs): {1e3 * (time.perf_counter() - t) / 20:.2f} ms")
        w = rng.integers(0, n, 1500)
        lo = (w + rng.integers(1, n, 1500)) % n
        t = time.perf_counter()
        for _ in range(20):
            fit_bradley_terry(n, w, lo, 0.5)
        print(f"fit_bradley_terry (n=150, 1,500 comparisons): {1e3 * (time.perf_counter() - t) / 20:.2f} ms")
    t = time.perf_counter()
    curves = inversions.simulated_study(n, n_queries, max_rounds, 0.78, seed=0)
    print(f"simulated study: {n_queries} queries x {n} candidates x {max_rounds} rounds x 3 schedules "
          f"in {time.perf_counter() - t:.1f} s")
    s = inversions.curve_summary(curves)
    tab = inversions.study_table(s, 20)
    with pl.Config(tbl_rows=20, tbl_cols=12, tbl_width_chars=200):
        print(tab)
        print(s.filter(pl.col("round").is_in([5, 10, 13, 15, 20, 25, 30])).select(
            "schedule", "round", "judgments", "inversions", "inversions_sd"))


if __name__ == "__main__":
    main(*(int(x) for x in sys.argv[1:3]))
