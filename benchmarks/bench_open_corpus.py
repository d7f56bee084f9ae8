"""Open-corpus dense search: exact (chunked matmul) vs approximate (HNSW, hnswlib) indexes.

For each collection size: index build time, memory (the vectors themselves, what building the index
adds to the resident set, and the peak resident set of the process that generates the vectors,
builds and queries the index; each measurement runs in its own child process, so the figures do
not mix),
queries per second (all queries in one batch) and the approximate index's recall@k against exact
search at the same k.

Vectors (dim 384, float32, unit length), one of:
* ``structured`` (default): a stand-in for sentence embeddings, which fill a low-dimensional part of
  the space: latent points from a 200-centre Gaussian mixture in ``--latent`` (64) dimensions, mapped to
  384 by a fixed random matrix, plus isotropic noise (``--noise`` 0.3 per coordinate), normalized;
* ``uniform``: independent Gaussian coordinates, normalized (no structure: the hardest case for any
  graph index, and far from real embeddings);
* ``real``: the corpus' statements embedded with ``--model`` (from the embedding store in
  ``--cache-dir``; slow the first time); ``--queries`` random statements are held out as queries
  and the rest is indexed.
Synthetic queries are drawn from the same distribution (not from the indexed set).

    python benchmarks/bench_open_corpus.py [--sizes 17618,200000] [--data structured] [--queries 1000]
        [--M 16] [--ef-construction 100] [--ef 64,128] [--threads 2]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DIM, CENTRES = 384, 200


def vectors(kind: str, n: int, seed: int, args=None) -> np.ndarray:
    if kind == "real":
        return real_vectors(args)[args.queries:][:n] if seed == 0 else real_queries(args)
    rng = np.random.default_rng(seed)
    out = np.empty((n, DIM), dtype=np.float32)
    latent, noise = (args.latent, args.noise) if args is not None else (64, 0.3)
    if kind == "structured":
        P = np.random.default_rng(1000).standard_normal((latent, DIM)).astype(np.float32)
        C = np.random.default_rng(1001).standard_normal((CENTRES, latent)).astype(np.float32)
    for s in range(0, n, 100_000):           # in blocks: bounded temporary memory
        m = min(100_000, n - s)
        if kind == "uniform":
            x = rng.standard_normal((m, DIM), dtype=np.float32)
        elif kind == "structured":
            z = C[rng.integers(0, CENTRES, m)] + 0.7 * rng.standard_normal((m, latent), dtype=np.float32)
            x = z @ P + noise * rng.standard_normal((m, DIM), dtype=np.float32)
        else:
            raise ValueError(kind)
        out[s: s + m] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


def _real_texts(args):
    import polars as pl

    c = pl.read_parquet(args.corpus)
    return c["problem"].to_list()


def real_vectors(args):
    """The corpus statements' vectors, shuffled; the first ``--queries`` rows are held out as queries."""
    from saber_lib import embed

    enc = embed.get_encoder(args.model, max_chunks=args.real_max_chunks)
    v = embed.embed(enc, _real_texts(args), embed.EmbeddingStore(args.cache_dir), kind="document")
    return v[np.random.default_rng(5).permutation(len(v))]


def real_queries(args):
    return real_vectors(args)[: args.queries]


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


# ----------------------------------------------------------------------------- one measurement (child)
def worker(args) -> dict:
    from saber_lib.retrieval.indexes import ExactDenseIndex, HnswIndex

    X = vectors(args.data, args.n, 0, args)
    Q = vectors(args.data, args.queries, 1, args)
    ids = [str(i) for i in range(len(X))]
    import gc

    gc.collect()
    before = rss_mb()
    out = {"n": len(X), "method": args.method, "vectors_mb": round(X.nbytes / 2**20)}
    if args.method == "exact":
        t = time.perf_counter()
        ix = ExactDenseIndex(X, ids)
        out["build_s"] = time.perf_counter() - t
        out["index_mb"] = round(rss_mb() - before)
        t = time.perf_counter()
        rows, _ = ix.search(Q, args.k)
        out["qps"] = len(Q) / (time.perf_counter() - t)
        np.save(args.truth, rows)
        out["recall"] = 1.0
    else:
        t = time.perf_counter()
        ix = HnswIndex.build(ids, X, M=args.M, ef_construction=args.ef_construction, threads=args.threads)
        out["build_s"] = time.perf_counter() - t
        out["index_mb"] = round(rss_mb() - before)
        truth = np.load(args.truth)
        res = []
        for ef in args.ef:
            t = time.perf_counter()
            rows, _ = ix.search(Q, args.k, ef=ef)
            qps = len(Q) / (time.perf_counter() - t)
            rec = float(np.mean([len(set(a) & set(b)) / args.k for a, b in zip(rows, truth)]))
            res.append({"ef": ef, "qps": qps, "recall": rec})
        out["per_ef"] = res
    out["peak_rss_mb"] = round(peak_rss_mb())
    return out


def run_child(argv: list[str]) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, __file__, "--worker", *argv], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-3000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="17618,200000")
    ap.add_argument("--data", default="structured", choices=["structured", "uniform", "real"])
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--latent", type=int, default=64)
    ap.add_argument("--noise", type=float, default=0.3)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--M", type=int, default=16)
    ap.add_argument("--ef-construction", dest="ef_construction", type=int, default=100)
    ap.add_argument("--ef", default="64,128")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", default="paraphrase-minilm-l3")
    ap.add_argument("--corpus", default="runs/demo/corpus/corpus.parquet")
    ap.add_argument("--real-max-chunks", dest="real_max_chunks", type=int, default=2)
    ap.add_argument("--cache-dir", dest="cache_dir", default="runs/_cache")
    ap.add_argument("--json", help="also write the rows here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--method", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--truth", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.ef = [int(x) for x in str(args.ef).split(",")]
    if args.worker:
        print(json.dumps(worker(args)))
        return
    common = ["--data", args.data, "--latent", str(args.latent), "--noise", str(args.noise), "--queries", str(args.queries), "--k", str(args.k), "--M", str(args.M),
              "--ef-construction", str(args.ef_construction), "--ef", ",".join(map(str, args.ef)),
              "--threads", str(args.threads), "--model", args.model, "--corpus", args.corpus, "--real-max-chunks", str(args.real_max_chunks),
              "--cache-dir", args.cache_dir]
    rows = []
    print(f"data={args.data}" + (f" (latent {args.latent}, noise {args.noise})" if args.data == "structured" else "")
          + f" dim={DIM} queries={args.queries} k={args.k} hnswlib M={args.M} "
          f"ef_construction={args.ef_construction} threads={args.threads}", flush=True)
    hdr = (f"{'n':>9} {'method':<16} {'build s':>8} {'vectors MB':>10} {'+index MB':>9} {'peak RSS MB':>11} "
           f"{'queries/s':>10} {'recall@' + str(args.k):>10}")
    print(hdr)
    print("-" * len(hdr), flush=True)
    for n in [int(s) for s in args.sizes.split(",")]:
        with tempfile.TemporaryDirectory() as tmp:
            truth = str(Path(tmp) / "truth.npy")
            ex = run_child(common + ["--method", "exact", "--n", str(n), "--truth", truth])
            rows.append(ex)
            print(f"{ex['n']:>9} {'exact':<16} {ex['build_s']:>8.2f} {ex['vectors_mb']:>10} {ex['index_mb']:>9} "
                  f"{ex['peak_rss_mb']:>11} {ex['qps']:>10.0f} {1.0:>10.3f}", flush=True)
            ap_ = run_child(common + ["--method", "hnsw", "--n", str(n), "--truth", truth])
            rows.append(ap_)
            for r in ap_["per_ef"]:
                print(f"{ap_['n']:>9} {'hnsw ef=' + str(r['ef']):<16} {ap_['build_s']:>8.2f} {ap_['vectors_mb']:>10} "
                      f"{ap_['index_mb']:>9} {ap_['peak_rss_mb']:>11} {r['qps']:>10.0f} {r['recall']:>10.3f}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
