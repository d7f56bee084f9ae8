"""The open-corpus track: every system x representation retrieves over the whole corpus, results
are scored against the (growing) judgments, and the unrated top-k documents form the next pool.

System names:

* a registered retriever with a whole-corpus index (``retrieval.registry.first_stage_names``:
  ``bm25``, ``tfidf``, ``approach0``, every encoder of ``saber_lib.embed`` as exact dense search);
* ``<encoder>@hnsw``: the same vectors through the approximate (HNSW) index;
* ``<first>><reranker>`` (e.g. ``bm25>minilm``): the first system's top ``first_stage_n`` rescored
  by the reranker (any registered retriever that scores query texts, a plugin's included, or a key
  of ``rerankers`` mapping to a ``Retriever`` object such as :class:`rerank.LLMPointwiseReranker`).

The query text is the query's problem statement (``query_representation``); the representation
changes the document side only. Queries are corpus ids; a query id that is not in the corpus needs
a ``query_text`` column in ``queries``.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np
import polars as pl

from ..core.progress import Progress
from ..metrics.resample import bootstrap_ci
from ..retrieval.base import Retriever
from ..retrieval.corpus import CorpusEngine
from ..retrieval.registry import get_retriever
from .exclusion import exclusions
from ..metrics.ranking import per_query_metrics
from .pooling import pool_to_judge
from .rerank import rerank
from .texts import corpus_hash, representation_texts

DEFAULT_KS = (1, 5, 10, 20, 100)



@dataclass
class OpenCorpusResult:
    metrics: object            # polars: system, representation, metric, k, mean, ci_low, ci_high, judged_at_k, n_queries
    pool: object               # polars: query_id, cand_id, n_systems, best_rank (unrated pairs to judge)
    runs: object               # polars: system, representation, query_id, cand_id, rank, score
    per_query: object          # polars: system, representation, query_id, metric, k, value, judged_at_k
    info: dict = field(default_factory=dict)


def parse_system(name: str) -> tuple[str, str | None]:
    """(first stage, reranker or None) of a system name."""
    if ">" in name:
        first, rr = name.split(">", 1)
        if not first or not rr or ">" in rr:
            raise ValueError(f"bad two-stage system {name!r}: use '<first>><reranker>'")
        return first, rr
    return name, None


def _query_texts(corpus, queries, query_representation: str):
    qids = queries["query_id"].to_list()
    if "query_text" in queries.columns:
        return qids, queries["query_text"].to_list()
    ids, texts, _ = representation_texts(corpus, query_representation)
    by_id = dict(zip(ids, texts))
    missing = [q for q in qids if q not in by_id]
    if missing:
        raise KeyError(f"{len(missing)} query ids are not in the corpus (e.g. {missing[:3]}); "
                       "give their text in a query_text column")
    return qids, [by_id[q] for q in qids]


def run_open_corpus(corpus, queries, systems: Sequence[str], ratings, *,
                    representations: Sequence[str] = ("statement", "full", "summary"),
                    summaries=None, dedup_log=None, cache_dir=None, store=None,
                    embed_max_chunks: int | None = None, ks: Sequence[int] = DEFAULT_KS,
                    rel_cutoff: float = 3.0, ndcg_k: int = 10, pool_depth: int = 10,
                    first_stage_n: int = 100, n_bootstrap: int = 1000, level: float = 0.95,
                    seed: int = 0, bm25_k1: float = 1.5, bm25_b: float = 0.75,
                    hnsw_M: int = 16, hnsw_ef_construction: int = 100, hnsw_ef: int = 128,
                    rerankers: Mapping[str, Retriever] | None = None,
                    system_representations: Mapping[str, Sequence[str]] | None = None,
                    query_representation: str = "statement", progress=None) -> OpenCorpusResult:
    """The whole open-corpus track for ``systems`` x ``representations``.

    ``corpus``: ``doc_id, problem, solution``; ``queries``: ``query_id`` (+ optional
    ``query_text``); ``ratings``: ``query_id, cand_id, rating`` (0..5; the rated pairs);
    ``summaries``: ``doc_id, text`` or the summaries artifact (for the ``summary``
    representation); ``dedup_log``: the corpus stage's log (duplicates of a query are excluded);
    ``cache_dir``: where indexes are kept (None: build in memory); ``store``: an
    ``embed.EmbeddingStore`` (share the evaluate stage's one so vectors are reused).
    Metrics: Hit/Recall/MRR at ``ks`` with relevance = rating >= ``rel_cutoff``, nDCG@``ndcg_k``
    with gains 2^rating - 1 (unrated = 0); bootstrap over queries. The pool holds the unrated
    pairs of every run's top ``pool_depth``. ``system_representations`` restricts a system to
    some representations (e.g. a slow encoder to the ones already embedded); others run on all.
    """
    t_start = time.perf_counter()
    rerankers = dict(rerankers or {})
    say = progress or (lambda *_: None)
    qids, qtexts = _query_texts(corpus, queries, query_representation)
    excl = exclusions(qids, dedup_log)
    depth = max(max(ks), ndcg_k, pool_depth)
    fetch = depth + max((len(v) for v in excl.values()), default=1)

    # judgments without the query's own duplicates
    qrels: dict[str, dict[str, float]] = {q: {} for q in qids}
    for q, c, r in ratings.select("query_id", "cand_id", "rating").iter_rows():
        if q in qrels and c not in excl[q] and r is not None:
            qrels[q][c] = float(r)

    eng = CorpusEngine(cache_dir, store, embed_max_chunks, bm25_k1, bm25_b,
                  {"M": hnsw_M, "ef_construction": hnsw_ef_construction, "ef": hnsw_ef})
    run_rows, pq_rows, timing = [], [], {}
    counter = Progress("system", len(systems) * len(representations))
    for rep in representations:
        doc_ids, texts, n_fallback = representation_texts(corpus, rep, summaries)
        chash = corpus_hash(doc_ids, texts)
        text_of = dict(zip(doc_ids, texts))
        timing[f"summary_fallback/{rep}"] = n_fallback
        searched: dict[str, tuple[int, list]] = {}   # system -> (n, hits): one search serves both uses

        def first_stage(name: str, n: int):
            if name in searched and searched[name][0] >= n:
                return [h[:n] for h in searched[name][1]]
            t0 = time.perf_counter()
            rows, vals = eng.search(name, rep, doc_ids, texts, chash, qtexts, n + (fetch - depth))
            out = []
            for qi, q in enumerate(qids):
                hits = [(doc_ids[r], float(v)) for r, v in zip(rows[qi], vals[qi])
                        if r >= 0 and doc_ids[r] not in excl[q]]
                out.append(hits[:n])
            timing[f"search/{name}/{rep}"] = time.perf_counter() - t0
            searched[name] = (n, out)
            return out

        for system in systems:
            counter.update()
            if system_representations and rep not in system_representations.get(system, representations):
                continue
            say(f"{system} / {rep}")
            first, rr_name = parse_system(system)
            if rr_name is None:
                ranked = first_stage(first, depth)
            else:
                cand = first_stage(first, max(first_stage_n, 1))
                reranker = rerankers.get(rr_name) or get_retriever(rr_name, store=store, cache_dir=cache_dir,
                                                                   max_chunks=embed_max_chunks, k1=bm25_k1, b=bm25_b)
                t0 = time.perf_counter()
                ranked = rerank_lists(reranker, qids, qtexts, cand, text_of)
                timing[f"rerank/{system}/{rep}"] = time.perf_counter() - t0
            run = {}
            for q, hits in zip(qids, ranked):
                hits = hits[:depth]
                run[q] = [d for d, _ in hits]
                run_rows += [(system, rep, q, d, i, s) for i, (d, s) in enumerate(hits, 1)]
            for q, metric, k, value, jk in per_query_metrics(run, qrels, ks, rel_cutoff, ndcg_k):
                pq_rows.append((system, rep, q, metric, k, value, jk))

    counter.close()
    runs = pl.DataFrame(run_rows, schema={"system": pl.Utf8, "representation": pl.Utf8, "query_id": pl.Utf8,
                                          "cand_id": pl.Utf8, "rank": pl.Int64, "score": pl.Float64}, orient="row")
    per_query = pl.DataFrame(pq_rows, schema={"system": pl.Utf8, "representation": pl.Utf8, "query_id": pl.Utf8,
                                              "metric": pl.Utf8, "k": pl.Int64, "value": pl.Float64,
                                              "judged_at_k": pl.Float64}, orient="row")
    metrics = summarize_metrics(per_query, n_bootstrap, level, seed)
    pool = pool_to_judge(runs, ratings, pool_depth)
    info = {"indexes": eng.info, "timing": timing, "n_queries": len(qids), "n_docs": corpus.height,
            "depth": depth, "rel_cutoff": rel_cutoff, "pool_depth": pool_depth,
            "excluded_duplicates": sum(len(v) - 1 for v in excl.values()),
            "total_s": time.perf_counter() - t_start}
    return OpenCorpusResult(metrics, pool, runs, per_query, info)


def rerank_lists(reranker, qids, qtexts, cand, text_of):
    return rerank(reranker, qids, qtexts, [[d for d, _ in c] for c in cand], text_of)


def summarize_metrics(per_query, n_bootstrap: int = 1000, level: float = 0.95, seed: int = 0):
    """Per (system, representation, metric, k): mean over queries with a defined value, its
    bootstrap interval (``evaluate.bootstrap_ci``), mean judged@k over all queries, and the count."""
    rows = []
    keys = ["system", "representation", "metric", "k"]
    for (s, r, m, k), g in per_query.group_by(keys, maintain_order=True):
        v = g["value"].to_numpy()
        v = v[~np.isnan(v)]
        mean, lo, hi = bootstrap_ci(v, n_bootstrap, level, seed) if v.size else (math.nan,) * 3
        rows.append((s, r, m, int(k), mean, lo, hi, float(g["judged_at_k"].mean()), int(v.size)))
    return pl.DataFrame(rows, schema={"system": pl.Utf8, "representation": pl.Utf8, "metric": pl.Utf8,
                                      "k": pl.Int64, "mean": pl.Float64, "ci_low": pl.Float64,
                                      "ci_high": pl.Float64, "judged_at_k": pl.Float64,
                                      "n_queries": pl.Int64}, orient="row")
