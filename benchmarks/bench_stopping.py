"""Judging that stops when the evaluation is stable, against plain Swiss at R = 20 (prints a table;
not a test).

    python benchmarks/bench_stopping.py [n_queries] [n_cands] [max_rounds]

Setting: synthetic queries (N(0, 1) latent strengths), a simulated Bradley-Terry judge that agrees
with the latent order on 78% of random pairs, six synthetic retrievers whose scores are the latent
strength plus Gaussian noise of sd 0.3 .. 4 (best to worst); once with homogeneous queries, once
with queries of varied difficulty (each query's strengths scaled by a log-normal factor). Plain Swiss plays every query for
R rounds; each stopping rule plays the same Swiss pairs (same seeds, same judge) and stops a query
earlier when its rule says so. Columns: judgments used and their share of plain Swiss, Kendall tau
between the two system orders (by mean nDCG@10), whether the order is identical, the largest change
of any system's mean nDCG@10, and the wall time. Goal: the same order and no change above
0.005 with at most half of the judgments.
"""
import sys
import time

import numpy as np

from saber_lib.robustness import simulate
from saber_lib.robustness.stopping import compare_to_plain, run_with_stopping

QUALITIES = {"r1": 0.3, "r2": 0.6, "r3": 1.0, "r4": 1.5, "r5": 2.5, "r6": 4.0}

CONFIGS = [
    ("stable spread<=0.10", dict(rule="stable", tol=0.10)),
    ("stable spread<=0.09", dict(rule="stable", tol=0.09)),
    ("stable spread<=0.08", dict(rule="stable", tol=0.08)),
    ("stable 0.08 pooled k", dict(rule="stable", tol=0.08, sharpness="pooled")),
    ("plateau 3 rds <2%", dict(rule="plateau", min_shrink=0.02, window=3)),
    ("plateau <2%, R>=10", dict(rule="plateau", min_shrink=0.02, window=3, min_rounds=10)),
]


def main(n_queries=50, n_cands=30, max_rounds=20):
    for spread_sd, what in ((0.0, "homogeneous queries"), (0.6, "queries of varied difficulty")):
        print(f"\n=== {what} (strength scale exp({spread_sd} z) per query)")
        scenario(n_queries, n_cands, max_rounds, spread_sd)


def scenario(n_queries, n_cands, max_rounds, spread_sd):
    bench = simulate.SyntheticBenchmark(n_queries, n_cands, seed=0, spread_sd=spread_sd)
    judge = bench.judge(agreement=0.78, seed=0)
    scores = bench.scores(QUALITIES, seed=1)
    t = time.perf_counter()
    plain_j = simulate.swiss_judgments(bench, judge, rounds=max_rounds, seed=0)
    plain = simulate.ratings_table(bench, plain_j)
    t_plain = time.perf_counter() - t
    n_plain = plain_j.height
    print(f"{n_queries} queries x {n_cands} candidates, judge calibrated to 0.78 on N(0,1) strengths "
          f"(realized agreement in the Swiss judgments {simulate.realized_agreement(bench, plain_j):.3f}), "
          f"R = {max_rounds}, {len(QUALITIES)} retrievers; plain Swiss: {n_plain} judgments ({t_plain:.1f} s)")
    base = compare_to_plain(plain, plain, scores)
    print("plain Swiss mean nDCG@10: " + ", ".join(f"{s[0]} {m:.3f}" for s, m in zip(base["systems"],
                                                                                    base["mean_plain"])))
    head = f"{'rule':<22}{'judgments':>10}{'share':>8}{'tau':>7}{'same order':>12}{'max |dnDCG|':>13}" \
           f"{'mean rounds':>13}{'time s':>8}"
    print(head)
    print("-" * len(head))
    for label, cfg in CONFIGS:
        t = time.perf_counter()
        res = run_with_stopping(bench.query_ids, bench.cand_ids, judge, scores, max_rounds=max_rounds,
                                seed=0, n_draws=64, progress=False, **cfg)
        dt = time.perf_counter() - t
        cmp = compare_to_plain(res.ratings, plain, scores)
        print(f"{label:<22}{res.n_judgments:>10}{res.n_judgments / n_plain:>8.2f}{cmp['kendall_tau']:>7.2f}"
              f"{str(cmp['same_order']):>12}{cmp['max_abs_change']:>13.4f}"
              f"{float(res.rounds['rounds'].mean()):>13.1f}{dt:>8.1f}")
    for R in (10, 15):  # fixed truncation of plain Swiss, for reference
        tj = plain_j.filter(plain_j["round"] <= R)
        cmp = compare_to_plain(simulate.ratings_table(bench, tj), plain, scores)
        print(f"{'fixed R=' + str(R):<22}{tj.height:>10}{tj.height / n_plain:>8.2f}{cmp['kendall_tau']:>7.2f}"
              f"{str(cmp['same_order']):>12}{cmp['max_abs_change']:>13.4f}{float(R):>13.1f}{'-':>8}")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
