"""CPU of reading a benchmark table into per-query plans (``judging.tournament.plan_queries``, read
twice per tournament) against the number of queries (prints numbers; not a test).

    python benchmarks/bench_plan_queries.py

150 candidates per query, rows shuffled; a cost per query that rises with the queries is a
quadratic loop.
"""
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from saber_lib.judging.tournament import plan_queries  # noqa: E402

for q in (100, 300, 1000):
    c = 150
    b = pl.DataFrame({"query_id": np.repeat([f"q{i}" for i in range(q)], c), "cand_id": [f"c{i}" for i in range(q * c)],
                      "position": np.tile(np.arange(c), q)}).sample(fraction=1.0, shuffle=True, seed=0)
    t = time.process_time()
    plan_queries(b)
    t1 = time.process_time() - t
    print(f"{q} queries x {c}: plan_queries {t1:.3f} s CPU ({1e3 * t1 / q:.2f} ms per query)", flush=True)
