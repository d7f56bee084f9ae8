"""Paper-scale simulation: the whole signals stage on synthetic corpora on a local Dask cluster, and
projections to the paper's 283K problems (and 1M) on 25- and 100-core clusters.

    python benchmarks/bench_scale.py --run-dir runs/demo [--sizes 10000 25000 50000] [--workers 2]

Synthetic corpora are drawn from a finished run's own distributions (``--run-dir``: its topics,
summaries and ontology): each synthetic problem copies a random real problem (its "template") and
perturbs it, so topic-set sizes, which topics go together, summary lengths and the vocabulary's
frequencies are the real corpus's: every topic of the template is replaced with probability 0.25 by
a topic drawn by frequency; every summary token is kept with probability 0.5, else replaced by a
token drawn by frequency. The Lin matrix is the real one over the run's used topics.

Every size runs the whole stage: ``compute_all_pairs`` on a ``DaskExecutor`` (a ``LocalCluster`` of
``--workers`` single-threaded processes), every block's results merged by the driver into the
``signals/`` files on disk. Per size: wall time, the CPU seconds of the workers and of the driver
(the merge is serial), the CPU seconds of the blocks' own threads, topic-pair evaluations (sum of
|A| x |B| over the pairs), the peak RSS of the largest worker and the bytes written. Sizes from
``--check-min`` on are also estimated the cheap way (a random sample of query blocks, each against
all N candidates, on a fresh cluster; the CPU through the cost model of
:mod:`saber_lib.signals.cost`, and, as before, scaled by N / sampled rows) and the estimates are
compared with the full run. The fit ``cpu = c N^b`` uses the full runs
only; the 283K and 1M rows are projections from it (worker memory: a line through the peaks of the full runs whose
candidate tile the memory budget caps; disk: bytes per pair of the largest run), labelled as such.
"""
from __future__ import annotations

import argparse
import importlib
import os
import pickle
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from saber_lib.ontology.tree import ontology_from_nodes  # noqa: E402
from saber_lib.core.parallel import DaskExecutor  # noqa: E402
from saber_lib.signals import pairs, summary_tokens  # noqa: E402
from saber_lib.signals.cost import cost_model_total, row_scaled_total  # noqa: E402
from saber_lib.signals.topic import topic_sets  # noqa: E402

PAPER = {"n": 283_000, "cores": 25, "hours": 1.0}


def real_distributions(run_dir: Path) -> dict:
    """The real corpus's topic sets (indices into the Lin matrix of its used topics) and token sets."""
    top = pl.read_parquet(run_dir / "topics" / "topics.parquet")
    summ = pl.read_parquet(run_dir / "summaries" / "summaries.parquet")
    df = top.join(summ.select("doc_id", "summary_text"), on="doc_id", how="inner")
    nodes = [[] if f else list(ns or []) for ns, f in zip(df["node_ids"].to_list(), df["failed"].to_list())]
    ts = topic_sets(ontology_from_nodes(run_dir / "ontology" / "nodes.parquet"), nodes)
    sets = [ts.sets.idx[i, :ts.sets.size[i]].tolist() for i in range(len(nodes))]
    toks = [sorted(summary_tokens(t)) for t in df["summary_text"].to_list()]
    vocab = sorted({t for ts_ in toks for t in ts_})
    pos = {t: i for i, t in enumerate(vocab)}
    tok_ids = [[pos[t] for t in ts_] for ts_ in toks]
    tf = np.bincount([i for s in tok_ids for i in s], minlength=len(vocab)).astype(np.float64)
    pf = np.bincount([i for s in sets for i in s], minlength=ts.lin.shape[0]).astype(np.float64)
    return {"sets": sets, "tokens": tok_ids, "vocab": np.array(vocab, dtype=object), "lin": ts.lin,
            "p_token": tf / tf.sum(), "p_topic": pf / pf.sum()}


def synthetic_corpus(dist: dict, n: int, seed: int = 0, p_topic_swap: float = 0.25, p_token_keep: float = 0.5):
    """``n`` problems (token sets, topic sets) drawn from the real distributions (module docstring)."""
    rng = np.random.default_rng(seed)
    r = len(dist["sets"])
    tmpl = rng.integers(0, r, n)
    n_top = sum(len(dist["sets"][j]) for j in tmpl)
    n_tok = sum(len(dist["tokens"][j]) for j in tmpl)
    top_draw = iter(rng.choice(len(dist["p_topic"]), n_top, p=dist["p_topic"]).tolist())
    tok_draw = iter(rng.choice(len(dist["p_token"]), n_tok, p=dist["p_token"]).tolist())
    swap = iter((rng.random(n_top) < p_topic_swap).tolist())
    keep = iter((rng.random(n_tok) < p_token_keep).tolist())
    vocab = dist["vocab"]
    topics, tokens = [], []
    for j in tmpl.tolist():
        topics.append([next(top_draw) if next(swap) else t for t in dist["sets"][j]])
        tokens.append(frozenset(vocab[t if next(keep) else next(tok_draw)] for t in dist["tokens"][j]))
    return tokens, topics


def measure(dist: dict, n: int, workers: int, budget_mb: int) -> dict:
    t0 = time.perf_counter()
    toks, tops = synthetic_corpus(dist, n, seed=n)
    inp = pairs.build_inputs(toks, tops, dist["lin"], hist_bins=100, floor_topic=0.5, floor_summ=0.1)
    prep = time.perf_counter() - t0
    shared_mb = len(pickle.dumps(inp, protocol=5)) / 2 ** 20
    lin_mb = inp.lin.nbytes / 2 ** 20   # fixed (used topics); the rest grows with N
    out = Path(tempfile.mkdtemp(prefix=f"bench_scale_{n}_"))
    try:
        with DaskExecutor(None, workers) as ex:
            cpu0 = {w: s["cpu_s"] for w, s in ex.worker_stats().items()}
            d0, t1 = time.process_time(), time.perf_counter()
            st = pairs.compute_all_pairs(inp, out, [str(i) for i in range(n)], memory_budget_mb=budget_mb,
                                         executor=ex)
            wall, driver = time.perf_counter() - t1, time.process_time() - d0   # store written and merged
            stats = ex.worker_stats()
        cpu = sum(s["cpu_s"] - cpu0.get(w, 0.0) for w, s in stats.items())
        return {"n": n, "pairs": st.n_pairs, "evals": pair_evaluations(inp), "stored": st.n_stored,
                "wall_s": wall, "cpu_s": cpu, "task_cpu_s": st.task_cpu_s, "driver_cpu_s": driver,
                "all_cpu_s": cpu + driver, "load": os.getloadavg()[0],
                "prep_s": prep, "peak_mb": max(s["peak_rss_mb"] for s in stats.values()),
                "shared_mb": shared_mb, "lin_mb": lin_mb, "disk_mb": st.bytes_on_disk / 2 ** 20, "block": st.block,
                "col_tile": st.col_tile}
    finally:
        shutil.rmtree(out, ignore_errors=True)


def _timed_block(inp, task):
    """A stage task, the worker process it ran on, when it started there (to tell each worker's first
    block) and the CPU seconds of that whole process meanwhile (the row-scaled estimate's unit; the
    block's own thread CPU is in the result)."""
    pid, start, c0 = os.getpid(), time.monotonic(), time.process_time()
    r = pairs._run_block(inp, task)
    return pid, start, time.process_time() - c0, r


def measure_sampled(dist: dict, n: int, workers: int, budget_mb: int, sample_pairs: float) -> dict:
    """As :func:`measure`, on a random sample of the query blocks (each against all N candidates, the
    stage's own tasks) on a fresh cluster of as many workers. Two estimates of the full run's CPU:

    * ``row_cpu_s`` (the earlier method): the workers' CPU around the sampled tasks scaled by N / sampled
      rows, the rest of the workers' CPU added once;
    * ``task_cpu_s`` (:func:`saber_lib.signals.cost.cost_model_total`): the blocks' own thread CPU
      through a cost model of their pairs and topic-pair evaluations, every block of the full run
      predicted from its own work, each worker's first-block warm-up counted once; ``cpu_s``: that,
      the workers' one-off imports, and the CPU of their other threads (Dask's communication and
      monitors: it grows with the wall time, so it is scaled as the blocks' CPU is, at the same load).

    Stored pairs, disk and wall are scaled by the rows (wall: by the tasks' CPU)."""
    t0 = time.perf_counter()
    toks, tops = synthetic_corpus(dist, n, seed=n)
    inp = pairs.build_inputs(toks, tops, dist["lin"], hist_bins=100, floor_topic=0.5, floor_summ=0.1)
    prep = time.perf_counter() - t0
    shared_mb = len(pickle.dumps(inp, protocol=5)) / 2 ** 20
    with DaskExecutor(None, workers) as ex:
        a, b = pairs.plan_tiles(inp.n, inp.n_lin, inp.topic_pad.shape[1], budget_mb, ex.workers)
        starts = list(range(0, n, a))
        k = min(len(starts), max(2 * ex.workers, int(np.ceil(sample_pairs / (a * n)))))
        pick = sorted(np.random.default_rng(0).choice(len(starts), k, replace=False).tolist())
        tasks = [(starts[i], min(n, starts[i] + a), b) for i in pick]
        # the stage's modules imported on every worker first: a one-off whatever the blocks
        cpu_start = {w: s["cpu_s"] for w, s in ex.worker_stats().items()}
        ex.client.run(importlib.import_module, pairs.__name__)
        cpu0 = {w: s["cpu_s"] for w, s in ex.worker_stats().items()}
        t1 = time.perf_counter()
        timed = list(ex.map(_timed_block, tasks, inp))
        wall = time.perf_counter() - t1
        stats = ex.worker_stats()
    one_off = sum(cpu0[w] - c for w, c in cpu_start.items())
    total = sum(s["cpu_s"] - cpu0.get(w, 0.0) for w, s in stats.items())
    res = [r for *_, r in timed]
    rows = sum(r.r1 - r.r0 for r in res)
    proc = [c for _, _, c, _ in timed]
    row_cpu = row_scaled_total([r.r1 - r.r0 for r in res], proc, n) + (total - sum(proc)) + one_off
    first_start = {}
    for pid, start, _, _ in timed:
        first_start[pid] = min(first_start.get(pid, start), start)
    first = [start == first_start[pid] for pid, start, _, _ in timed]
    block_cpu = sum(r.cpu_s for r in res)
    task_cpu = cost_model_total([inp.block_work(r.r0, r.r1) for r in res], [r.cpu_s for r in res],
                                [inp.block_work(r0, min(n, r0 + a)) for r0 in starts], first)
    count_bytes = 2 if n < 65536 else 4
    nbytes = sum(r.hist_cells.nbytes + count_bytes * r.hist_counts.size + r.pair_ids.nbytes + r.pair_topic.nbytes
                 + r.pair_summ.nbytes + 16 * (r.r1 - r.r0) for r in res)
    scale = n / rows
    return {"n": n, "pairs": n * (n - 1), "stored": sum(len(r.pair_ids) for r in res) * scale,
            "wall_s": wall * task_cpu / block_cpu, "cpu_s": one_off + task_cpu + (total - block_cpu) * task_cpu / block_cpu,
            "task_cpu_s": task_cpu, "sample_block_cpu_s": block_cpu, "sample_other_cpu_s": total - block_cpu,
            "one_off_cpu_s": one_off,
            "row_cpu_s": row_cpu, "prep_s": prep, "peak_mb": max(s["peak_rss_mb"] for s in stats.values()),
            "shared_mb": shared_mb, "lin_mb": inp.lin.nbytes / 2 ** 20, "disk_mb": nbytes * scale / 2 ** 20,
            "block": a, "col_tile": b, "sampled": rows / n, "blocks": f"{k} of {len(starts)}"}


def pair_evaluations(inp) -> float:
    """Topic-pair evaluations of all ordered pairs: sum over q != c of |X_q| x |X_c|."""
    k = inp.n_topics.astype(np.float64)
    return float(k.sum() ** 2 - (k ** 2).sum())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-dir", type=Path, required=True, help="a finished run (topics, summaries, ontology)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 25_000, 50_000])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--budget-mb", type=int, default=2048, help="signals.memory_budget_mb (all workers)")
    ap.add_argument("--targets", type=int, nargs="+", default=[283_000, 1_000_000])
    ap.add_argument("--cores", type=int, nargs="+", default=[25, 100])
    ap.add_argument("--check-min", type=int, default=25_000,
                    help="sizes from this on are also estimated from a sample of query blocks")
    ap.add_argument("--sample-pairs", type=float, default=2e8, help="pairs computed per sampled estimate")
    args = ap.parse_args(argv)
    dist = real_distributions(args.run_dir)
    sz = np.array([len(s) for s in dist["sets"]])
    tk = np.array([len(s) for s in dist["tokens"]])
    print(f"real corpus ({args.run_dir}): {len(sz)} problems, topics/problem mean {sz.mean():.2f} "
          f"(max {sz.max()}), {dist['lin'].shape[0]} used topics, summary tokens/problem mean {tk.mean():.1f} "
          f"(median {np.median(tk):.0f}, max {tk.max()}), vocabulary {len(dist['vocab'])}")
    print(f"whole stage on a LocalCluster of {args.workers} worker processes, memory_budget_mb {args.budget_mb}; "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f} at the start")
    print(f"{'N':>8} {'pairs':>10} {'topic evals':>11} {'stored':>10} {'wall s':>8} {'worker CPU s':>12} "
          f"{'block CPU s':>11} {'driver CPU s':>12} {'Mpairs/CPU-s':>12} {'Mevals/CPU-s':>12} {'peak MB/worker':>14} "
          f"{'disk MB':>8} {'load':>5}  run")
    rows, checks = [], []
    for n in args.sizes:
        r = measure(dist, n, args.workers, args.budget_mb)
        rows.append(r)
        print(f"{r['n']:>8} {r['pairs']:>10.3g} {r['evals']:>11.3g} {r['stored']:>10.3g} {r['wall_s']:>8.1f} "
              f"{r['cpu_s']:>12.1f} {r['task_cpu_s']:>11.1f} {r['driver_cpu_s']:>12.1f} "
              f"{r['pairs'] / r['all_cpu_s'] / 1e6:>12.2f} {r['evals'] / r['all_cpu_s'] / 1e6:>12.1f} "
              f"{r['peak_mb']:>14.0f} {r['disk_mb']:>8.1f} {r['load']:>5.1f}  full (store written)", flush=True)
        if n >= args.check_min:
            e = measure_sampled(dist, n, args.workers, args.budget_mb, args.sample_pairs)
            checks.append((n, e, r))
            print(f"{'':>8} {'':>10} {'':>11} {e['stored']:>10.3g} {e['wall_s']:>8.1f} {e['cpu_s']:>12.1f} "
                  f"{e['task_cpu_s']:>11.1f} {'':>12} {e['pairs'] / e['cpu_s'] / 1e6:>12.2f} {'':>12} "
                  f"{e['peak_mb']:>14.0f} {e['disk_mb']:>8.1f} {os.getloadavg()[0]:>5.1f}  estimate from "
                  f"{e['blocks']} query blocks ({100 * e['sampled']:.1f}% of the rows)", flush=True)
    for n, e, r in checks:
        errs = [(what, est, got, est / got - 1) for what, est, got in (
            ("block CPU, cost model", e["task_cpu_s"], r["task_cpu_s"]),
            ("worker CPU, cost model", e["cpu_s"], r["cpu_s"]),
            ("worker CPU, row-scaled (earlier method)", e["row_cpu_s"], r["cpu_s"]))]
        print(f"sampled estimate at N={n} (estimate vs full run): " + "; ".join(
            f"{what} {est:.1f} vs {got:.1f} s ({100 * err:+.1f}%, {'within' if abs(err) <= 0.15 else 'OUTSIDE'} 15%)"
            for what, est, got, err in errs) + f"; disk {e['disk_mb']:.1f} vs {r['disk_mb']:.1f} MB (the sample: "
              f"blocks {e['sample_block_cpu_s']:.1f} CPU-s, the workers' other threads {e['sample_other_cpu_s']:.1f}, "
              f"imports {e['one_off_cpu_s']:.1f})")
    ns = np.array([r["n"] for r in rows], float)
    allcpu = np.array([r["all_cpu_s"] for r in rows])
    if len(rows) >= 2:
        b, loga = np.polyfit(np.log(ns), np.log(allcpu), 1)
        bw, _ = np.polyfit(np.log(ns), np.log([r["wall_s"] for r in rows]), 1)
        # worker memory: tiles grow with N until the budget caps the candidate tile; above that only
        # the inputs and the per-block results grow, so the line goes through the capped runs
        capped = [r for r in rows if r["col_tile"] < r["n"]]
        mem_rows = capped if len(capped) >= 2 else rows
        mem_slope, mem_icpt = np.polyfit([r["n"] for r in mem_rows], [r["peak_mb"] for r in mem_rows], 1)
        drv_b, drv_loga = np.polyfit(np.log(ns), np.log([max(r["driver_cpu_s"], 1e-3) for r in rows]), 1)
    else:  # one run: quadratic CPU, flat memory
        b, loga, bw, mem_slope, mem_icpt = 2.0, np.log(allcpu[0] / ns[0] ** 2), float("nan"), 0.0, rows[0]["peak_mb"]
        drv_b, drv_loga = 2.0, np.log(max(rows[0]["driver_cpu_s"], 1e-3) / ns[0] ** 2)
    print(f"fit over the full runs ({', '.join(str(int(x)) for x in ns)}): CPU (workers + driver) = "
          f"{np.exp(loga):.3g} N^{b:.2f}, wall ~ N^{bw:.2f}, driver CPU ~ N^{drv_b:.2f}, "
          f"peak worker RSS = {mem_icpt:.0f} MB + {mem_slope * 1e3:.3f} MB per 1K problems (over N = "
          f"{', '.join(str(r['n']) for r in mem_rows)}: candidate tile capped by the budget)")
    big = rows[-1]
    disk_per_pair = big["disk_mb"] / big["pairs"]
    print("PROJECTIONS (not measured): CPU divided over the cores; the driver's merge is serial, so wall >= its "
          "CPU; Dask overhead and stragglers not included. 'fit': the power laws above; 'quadratic': CPU per "
          f"pair of the largest full run (N={big['n']}) times the pairs (an upper bound while the fit is below N^2)")
    print(f"{'N':>9} {'pairs':>10} {'model':>9} {'CPU h':>8} " + " ".join(f"{f'{c} cores min':>13}" for c in args.cores)
          + f" {'driver min':>10} {'disk GB':>8} {'MB/worker':>9}")
    for n in args.targets:
        p = n * (n - 1)
        note = f"  paper: {PAPER['hours']:.0f} h on {PAPER['cores']} cores" if n == PAPER["n"] else ""
        for model, cpu, drv in (("fit", np.exp(loga) * n ** b, np.exp(drv_loga) * n ** drv_b),
                                ("quadratic", big["all_cpu_s"] / big["pairs"] * p, big["driver_cpu_s"] / big["pairs"] * p)):
            mins = [max(cpu / c, drv) / 60 for c in args.cores]
            print(f"{n:>9} {p:>10.3g} {model:>9} {cpu / 3600:>8.2f} " + " ".join(f"{m:>13.1f}" for m in mins)
                  + f" {drv / 60:>10.1f} {disk_per_pair * p / 1024:>8.1f} {mem_icpt + mem_slope * n:>9.0f}  projection{note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
