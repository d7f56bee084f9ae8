"""Paper-scale simulation: the signals stage on synthetic corpora on a local Dask cluster, and the
extrapolation to the paper's 283K problems (and 1M) on 25- and 100-core clusters.

    python benchmarks/bench_scale.py --run-dir runs/demo [--sizes 10000 25000 50000] [--workers 2]

Synthetic corpora are drawn from a finished run's own distributions (``--run-dir``: its topics,
summaries and ontology): each synthetic problem copies a random real problem (its "template") and
perturbs it, so topic-set sizes, which topics go together, summary lengths and the vocabulary's
frequencies are the real corpus's: every topic of the template is replaced with probability 0.25 by
a topic drawn by frequency; every summary token is kept with probability 0.5, else replaced by a
token drawn by frequency. The Lin matrix is the real one over the run's used topics.

Sizes up to ``--full-max`` run the whole stage; larger ones run a random sample of its query blocks
(each block against all N candidates, as in the stage) and scale by N / sampled rows (so a 2-core
machine measures 283K in minutes); the table says which. Per size: wall time of the all-pairs computation (``DaskExecutor`` on a ``LocalCluster`` of
``--workers`` single-threaded processes), the CPU seconds the workers spent, the peak RSS of the
largest worker, and the bytes written (the ``signals/`` files). The fit ``wall = c * N^b`` shows the
quadratic growth; the extrapolation uses the measured CPU seconds per pair (robust to a machine
shared with other jobs) divided over 25 or 100 cores, beside the paper's 1 hour on 25 cores.
"""
from __future__ import annotations

import argparse
import pickle
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from saber_lib.ontology import ontology_from_nodes  # noqa: E402
from saber_lib.parallel import DaskExecutor  # noqa: E402
from saber_lib.signals import pairs, summary_tokens  # noqa: E402
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
            st = pairs.compute_all_pairs(inp, out, [str(i) for i in range(n)], memory_budget_mb=budget_mb,
                                         executor=ex)
            stats = ex.worker_stats()
        cpu = sum(s["cpu_s"] - cpu0.get(w, 0.0) for w, s in stats.items())
        return {"n": n, "pairs": st.n_pairs, "stored": st.n_stored, "wall_s": st.wall_s, "cpu_s": cpu,
                "prep_s": prep, "peak_mb": max(s["peak_rss_mb"] for s in stats.values()),
                "shared_mb": shared_mb, "lin_mb": lin_mb, "disk_mb": st.bytes_on_disk / 2 ** 20, "block": st.block,
                "col_tile": st.col_tile}
    finally:
        shutil.rmtree(out, ignore_errors=True)


def measure_sampled(dist: dict, n: int, workers: int, budget_mb: int, sample_pairs: float) -> dict:
    """As :func:`measure`, on a random sample of the query blocks (each against all N candidates,
    the stage's own tasks): per-pair CPU, worker memory and bytes per query are those of the full
    run at this N; wall, CPU, stored pairs and disk are scaled by N / sampled rows."""
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
        cpu0 = {w: s["cpu_s"] for w, s in ex.worker_stats().items()}
        t1 = time.perf_counter()
        res = list(ex.map(pairs._run_block, tasks, inp))
        wall = time.perf_counter() - t1
        stats = ex.worker_stats()
    cpu = sum(s["cpu_s"] - cpu0.get(w, 0.0) for w, s in stats.items())
    rows = sum(r.r1 - r.r0 for r in res)
    count_bytes = 2 if n < 65536 else 4
    nbytes = sum(r.hist_cells.nbytes + count_bytes * r.hist_counts.size + r.pair_ids.nbytes + r.pair_topic.nbytes
                 + r.pair_summ.nbytes + 16 * (r.r1 - r.r0) for r in res)
    scale = n / rows
    return {"n": n, "pairs": n * (n - 1), "stored": sum(len(r.pair_ids) for r in res) * scale, "wall_s": wall * scale,
            "cpu_s": cpu * scale, "prep_s": prep, "peak_mb": max(s["peak_rss_mb"] for s in stats.values()),
            "shared_mb": shared_mb, "lin_mb": inp.lin.nbytes / 2 ** 20, "disk_mb": nbytes * scale / 2 ** 20,
            "block": a, "col_tile": b, "sampled": rows / n}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-dir", type=Path, required=True, help="a finished run (topics, summaries, ontology)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 25_000, 50_000])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--budget-mb", type=int, default=2048, help="signals.memory_budget_mb (all workers)")
    ap.add_argument("--targets", type=int, nargs="+", default=[50_000, 100_000, 283_000, 1_000_000])
    ap.add_argument("--cores", type=int, nargs="+", default=[25, 100])
    ap.add_argument("--full-max", type=int, default=10_000,
                    help="sizes above this run a random sample of query blocks (scaled to all N rows)")
    ap.add_argument("--sample-pairs", type=float, default=2e8, help="pairs computed per sampled size")
    args = ap.parse_args(argv)
    dist = real_distributions(args.run_dir)
    sz = np.array([len(s) for s in dist["sets"]])
    tk = np.array([len(s) for s in dist["tokens"]])
    print(f"real corpus ({args.run_dir}): {len(sz)} problems, topics/problem mean {sz.mean():.2f} "
          f"(max {sz.max()}), {dist['lin'].shape[0]} used topics, summary tokens/problem mean {tk.mean():.1f} "
          f"(median {np.median(tk):.0f}, max {tk.max()}), vocabulary {len(dist['vocab'])}")
    print(f"measured on a LocalCluster of {args.workers} worker processes, memory_budget_mb {args.budget_mb}")
    hdr = (f"{'N':>8} {'pairs':>10} {'stored':>10} {'wall s':>8} {'worker CPU s':>12} {'Mpairs/CPU-s':>12} "
           f"{'peak MB/worker':>14} {'shared MB':>9} {'disk MB':>8} {'prep s':>7}")
    print(hdr)
    rows = []
    for n in args.sizes:
        r = (measure(dist, n, args.workers, args.budget_mb) if n <= args.full_max
             else measure_sampled(dist, n, args.workers, args.budget_mb, args.sample_pairs))
        rows.append(r)
        how = f"rows sampled {100 * r['sampled']:.1f}%" if "sampled" in r else "full run"
        print(f"{r['n']:>8} {r['pairs']:>10.3g} {r['stored']:>10.3g} {r['wall_s']:>8.1f} {r['cpu_s']:>12.1f} "
              f"{r['pairs'] / r['cpu_s'] / 1e6:>12.2f} {r['peak_mb']:>14.0f} {r['shared_mb']:>9.1f} "
              f"{r['disk_mb']:>8.1f} {r['prep_s']:>7.1f}  {how}", flush=True)
    ns = np.array([r["n"] for r in rows], float)
    if len(rows) >= 2:
        b, loga = np.polyfit(np.log(ns), np.log([r["wall_s"] for r in rows]), 1)
        bc, _ = np.polyfit(np.log(ns), np.log([r["cpu_s"] for r in rows]), 1)
        print(f"fit: wall ~ N^{b:.2f}, worker CPU ~ N^{bc:.2f} (quadratic: 2)")
    big = rows[-1]
    cpu_per_pair = big["cpu_s"] / big["pairs"]
    disk_per_pair = big["disk_mb"] / big["pairs"]
    per_doc_mb = (big["shared_mb"] - big["lin_mb"]) / big["n"]   # inputs sent to every worker, per problem
    print(f"extrapolation from N={big['n']}: {cpu_per_pair * 1e9:.0f} CPU-ns per ordered pair, "
          f"{disk_per_pair * 2 ** 20:.3f} bytes on disk per pair; time = CPU-s per pair x N(N-1) / cores "
          f"(Dask overhead and stragglers not included)")
    print(f"{'N':>9} {'pairs':>10} " + " ".join(f"{f'{c} cores h':>12}" for c in args.cores)
          + f" {'disk GB':>8} {'shared MB':>9}  {'measured?':<10}")
    measured = {r["n"]: r for r in rows}
    for n in args.targets:
        p = n * (n - 1)
        hours = [cpu_per_pair * p / c / 3600 for c in args.cores]
        note = ("measured" + (" (row sample)" if "sampled" in measured[n] else "")) if n in measured else "extrapolated"
        if n == PAPER["n"]:
            note += f"; paper: {PAPER['hours']:.0f} h on {PAPER['cores']} cores"
        print(f"{n:>9} {p:>10.3g} " + " ".join(f"{h:>12.2f}" for h in hours)
              + f" {disk_per_pair * p / 1024:>8.1f} {per_doc_mb * n + big['lin_mb']:>9.0f}  {note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
