"""A small benchmark in the layout the SABER-Math authors released (``saber_lib.released.stage``), for
tests: written into a temporary folder, never downloaded.

Documents ``0 .. n_docs-1`` (ids ``d0``, ``d1``, ... unless ``doc_ids`` is given); every query lists
``n_candidates`` of them as row indices with relevance scores in [0, 5]. Query ids are ``0 .. n-1``
(the released queries' ids; the published result files index queries the same way).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl

TOPICS = ["prime divisors of factorials", "triangle incircle tangent lengths", "counting lattice paths",
          "quadratic residues modulo p", "convex function inequalities", "sums of geometric series",
          "pigeonhole principle on subsets", "limits of recursive sequences"]
DOMAIN_CYCLE = [["Number Theory"], ["Geometry"], ["Combinatorics"], ["Number Theory", "Algebra"],
                ["Calculus and Analysis"], ["Algebra"]]


def make_release(n_queries: int = 6, n_docs: int = 12, n_candidates: int = 5, seed: int = 0):
    """(queries rows, documents rows) as plain dicts in the released layout."""
    rng = np.random.default_rng(seed)
    documents = [{"id": f"d{i}", "problem": f"Problem {i} about {TOPICS[i % len(TOPICS)]}.",
                  "solution": f"Solution {i}: use {TOPICS[(i * 3) % len(TOPICS)]} and conclude."}
                 for i in range(n_docs)]
    queries = []
    for q in range(n_queries):
        cands = [int(c) for c in rng.choice(n_docs, size=n_candidates, replace=False)]
        scores = [float(x) for x in np.round(rng.uniform(0, 5, size=n_candidates), 3)]
        queries.append({"id": q, "problem": f"Query {q}: a question on {TOPICS[q % len(TOPICS)]}.",
                        "solution": f"Answer {q} via {TOPICS[(q + 1) % len(TOPICS)]}.",
                        "domains": DOMAIN_CYCLE[q % len(DOMAIN_CYCLE)], "candidates": cands,
                        "relevance_scores": scores})
    return queries, documents


def write_release(folder, queries, documents, fmt: str = "parquet") -> Path:
    """Write the two sets as ``queries.<fmt>`` and ``documents.<fmt>`` (``parquet`` or ``jsonl``)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in (("queries", queries), ("documents", documents)):
        if fmt == "parquet":
            pl.DataFrame(rows).write_parquet(folder / f"{name}.parquet")
        else:
            (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder
