"""Slider-to-update latency of the threshold explorer (05_thresholds) on a run's signals store.

One update = what a slider move costs in the kernel: category counts at the new grid point, the
per-domain read-out and table, the rule check, and the figure (crosshairs redrawn on the cached
heat maps, JPEG encoded). The target is 200 ms on the demo run (params/demo.yaml).

    python benchmarks/bench_explorer.py [--run-dir runs/demo] [--moves 60]

The heat maps need the stage's grid sweep (about 100 s on the demo store on 2 cores); by default the
sweep here covers the first tenth of the queries only (``--sweep-every 1`` for all): its cost is not part of an
update, and the figure's drawing cost does not depend on the counts.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

from saber_lib.core.config import DOMAINS
from saber_lib.signals import SignalStore
from saber_lib.signals.explorer import ExplorerModel
from saber_lib.signals.explorer_ui import ThresholdExplorer
from saber_lib.signals.rows import query_domains_for, usable_rows
from saber_lib.signals.thresholds import sweep


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", default="runs/demo")
    ap.add_argument("--moves", type=int, default=60)
    ap.add_argument("--sweep-every", type=int, default=10)
    a = ap.parse_args(argv)
    run = Path(a.run_dir)
    if not (run / "signals" / "meta.json").exists():
        print(f"{run}/signals is missing: run `saber run thresholds --params params/demo.yaml` first", file=sys.stderr)
        return 1
    store = SignalStore.open(run / "signals")
    topics = pl.read_parquet(run / "topics" / "topics.parquet")
    summaries = pl.read_parquet(run / "summaries" / "summaries.parquet")
    usable, qd = usable_rows(store.doc_ids, topics, summaries), query_domains_for(store.doc_ids, topics)
    K, Q_min = 10, 5
    sub = usable & (np.arange(store.n_docs) < store.n_docs // a.sweep_every)   # whole chunks skipped
    t0 = time.perf_counter()
    sw = sweep(store, qd, list(DOMAINS), k_values=[K], usable=sub)
    t_sweep = time.perf_counter() - t0
    t0 = time.perf_counter()
    model = ExplorerModel(store, qd, list(DOMAINS), sw, usable=usable, floor_topic=store.meta["pair_floor_topic"],
                          floor_summ=store.meta["pair_floor_summ"])
    t_model = time.perf_counter() - t0
    t0 = time.perf_counter()
    ex = ThresholdExplorer(model, tau_topic=0.85, tau_summ=0.2, K=K, Q_min=Q_min)
    t_first = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    lat = {"tau_topic": [], "tau_summ": [], "K": []}
    step = 1 / store.hist_bins
    for m in range(a.moves):
        which = ("tau_topic", "tau_summ", "tau_topic", "tau_summ", "K")[m % 5]
        if which == "tau_topic":
            ex.s_topic.value = float(np.clip(ex.s_topic.value + step * rng.choice([-3, -1, 1, 3]), ex.s_topic.min, 1))
        elif which == "tau_summ":
            ex.s_summ.value = float(np.clip(ex.s_summ.value + step * rng.choice([-3, -1, 1, 3]), ex.s_summ.min, 1))
        else:
            opts = list(ex.s_k.options)
            ex.s_k.value = opts[(opts.index(ex.s_k.value) + 1) % len(opts)]
        lat[which].append(ex.last_update_ms)
    print(f"store: {store.n_docs} queries, {len(store.hist_cells)} histogram cells ({run})")
    print(f"one-off: sweep (1/{a.sweep_every} of the queries) {t_sweep:.1f} s, model {t_model:.1f} s, first draw {t_first * 1000:.0f} ms")
    allv = np.concatenate([np.asarray(v) for v in lat.values()])
    for k, v in lat.items():
        v = np.asarray(v)
        print(f"{k:9s} move: median {np.median(v):6.1f} ms, p95 {np.percentile(v, 95):6.1f} ms, max {v.max():6.1f} ms ({len(v)} moves)")
    print(f"slider-to-update latency (kernel side): median {np.median(allv):.1f} ms, p95 {np.percentile(allv, 95):.1f} ms; "
          f"target 200 ms: {'met' if np.percentile(allv, 95) < 200 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
