"""Throughput of the registered encoders: texts/s on real math texts (no store, no cache).

    python benchmarks/bench_embed.py [--n 64] [--batch 16] [--threads 0] [--models minilm,mpnet]
                                     [--max-chunks 0]

Texts: the first ``n`` MATH problems with their solutions ("Problem: ...\\n\\nSolution: ..."), read
from the data directory. Prints one line per encoder: load seconds, texts/s, chunks per text.
"""
from __future__ import annotations

import argparse
import json
import time

from saber_lib import embed
from saber_lib.core.data import data_file
from saber_lib.core.text import document_text


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--models", default=",".join(embed.REGISTRY))
    ap.add_argument("--max-chunks", type=int, default=0)
    ap.add_argument("--data-dir", default=None)
    a = ap.parse_args()
    embed.set_threads(a.threads or None)
    texts = []
    with open(data_file(a.data_dir, "sources/math/math.jsonl")) as f:
        for line in f:
            d = json.loads(line)
            texts.append(document_text(d.get("problem", ""), d.get("solution")))
            if len(texts) >= a.n:
                break
    print(f"{len(texts)} texts, mean {sum(map(len, texts)) / len(texts):.0f} chars, batch {a.batch}, "
          f"threads {embed._threads()}")
    for name in a.models.split(","):
        try:
            t0 = time.perf_counter()
            enc = embed.get_encoder(name, max_chunks=a.max_chunks or None)
            load = time.perf_counter() - t0
        except Exception as e:  # report and go on with the others
            print(f"{name:>22}: unavailable ({e})")
            continue
        n_chunks = sum(len(enc.chunks(t)) for t in texts)
        enc.encode(texts[:2], batch_size=a.batch)  # warm-up
        t0 = time.perf_counter()
        enc.encode(texts, batch_size=a.batch)
        dt = time.perf_counter() - t0
        print(f"{name:>22}: load {load:5.1f} s  {len(texts) / dt:8.1f} texts/s  "
              f"{n_chunks / len(texts):.2f} chunks/text  dim {enc.dim}  {enc.model_id}")


if __name__ == "__main__":
    main()
