"""The ``signals`` stage (paper 3.4): corpus order, topic sets -> Lin/BMA, summary tokens ->
Jaccard, all pairs through :func:`saber_lib.signals.pairs.compute_all_pairs`."""
from __future__ import annotations

import resource  # Unix only
import time
from typing import Sequence

import polars as pl

from ..core.text import summary_tokens
from ..core.parallel import LocalProcessExecutor
from .pairs import build_inputs, compute_all_pairs
from .topic import topic_sets


def dedup_pairs_in_corpus(doc_ids: Sequence[str], dedup_log) -> list[tuple[int, int]]:
    """Row pairs (kept, removed) of the corpus dedup log whose two ids are both still in the corpus
    (there should be none: the corpus stage removes one of each pair)."""
    if dedup_log is None or dedup_log.height == 0 or "removed_id" not in dedup_log.columns:
        return []
    pos = {d: i for i, d in enumerate(doc_ids)}
    out = []
    for k, r in zip(dedup_log["kept_id"].to_list(), dedup_log["removed_id"].to_list()):
        if k in pos and r in pos:
            out.append((pos[k], pos[r]))
    return out


def compute_signals_stage(corpus, topics, summaries, ontology, out_dir, *, hist_bins: int,
                          pair_floor_topic: float, pair_floor_summ: float, jaccard_empty: float,
                          memory_budget_mb: int, workers: int, dedup_log=None, executor=None) -> dict:
    """The ``signals`` stage: corpus order, topic sets -> Lin/BMA, summary tokens -> Jaccard.

    Problems whose topic assignment failed have an empty topic set (topic similarity 0); problems
    whose summary failed or has no core idea have an empty token set (Jaccard ``jaccard_empty``
    against another empty set, else 0). Returns counts and timings for ``ctx.record``.
    """
    doc_ids = corpus["doc_id"].to_list()
    tmap = dict(zip(topics["doc_id"].to_list(),
                    [[] if f else list(ns or []) for ns, f in zip(topics["node_ids"].to_list(),
                                                                     topics["failed"].to_list())]))
    smap = dict(zip(summaries["doc_id"].to_list(), summaries["summary_text"].to_list()))
    node_lists = [tmap.get(d, []) for d in doc_ids]
    tokens = [summary_tokens(smap.get(d)) for d in doc_ids]
    ts = topic_sets(ontology, node_lists)
    sets = [ts.sets.idx[i, :ts.sets.size[i]].tolist() for i in range(len(doc_ids))]
    excl = dedup_pairs_in_corpus(doc_ids, dedup_log)
    inp = build_inputs(tokens, sets, ts.lin, hist_bins=hist_bins, floor_topic=pair_floor_topic,
                       floor_summ=pair_floor_summ, jaccard_empty=jaccard_empty, exclude_pairs=excl)
    executor = executor or LocalProcessExecutor(workers)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0, kids0 = time.process_time(), kids.ru_utime + kids.ru_stime
    w0 = _worker_cpu(executor)
    st = compute_all_pairs(inp, out_dir, doc_ids, memory_budget_mb=memory_budget_mb, executor=executor)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    # this process, the pool workers it reaped, and the workers of a Dask cluster (not its children)
    cpu = time.process_time() - t0 + kids.ru_utime + kids.ru_stime - kids0 + _worker_cpu(executor) - w0
    evals = inp.topic_pair_evaluations()
    return {"n_docs": st.n_docs, "n_pairs": st.n_pairs, "n_stored": st.n_stored, "wall_s": st.wall_s,
            "workers": st.workers, "block": st.block, "col_tile": st.col_tile,
            "bytes_on_disk": st.bytes_on_disk, "pairs_per_s": st.pairs_per_s,
            "pairs_per_s_per_core_wall": st.pairs_per_s_per_core, "cpu_s": cpu,
            "pairs_per_cpu_s": st.n_pairs / max(cpu, 1e-9), "topic_pair_evals": evals,
            "topic_pair_evals_per_cpu_s": evals / max(cpu, 1e-9),
            "n_without_topics": int(sum(1 for s in sets if not s)),
            "n_without_summary_tokens": int(sum(1 for t in tokens if not t)),
            "n_used_topics": int(len(ts.nodes)), "n_excluded_duplicate_pairs": len(excl)}


def _worker_cpu(executor) -> float:
    """CPU seconds used so far by the workers of an executor that reports them (Dask), else 0."""
    stats = getattr(executor, "worker_stats", None)
    if stats is None:
        return 0.0
    return sum(v.get("cpu_s") or 0.0 for v in stats().values())


THROUGHPUT_MEASURES = {"n_docs": "problems", "n_pairs": "ordered pairs",
                       "topic_pair_evals": "topic-pair evaluations (sum of set-size products)",
                       "n_stored": "stored pairs", "bytes_on_disk": "bytes on disk", "wall_s": "wall s",
                       "cpu_s": "CPU s", "pairs_per_s": "pairs/s", "pairs_per_cpu_s": "pairs per CPU-second",
                       "topic_pair_evals_per_cpu_s": "topic-pair evaluations per CPU-second", "workers": "workers"}


def throughput_table(stats: dict) -> pl.DataFrame:
    """The stage's throughput as a two-column table (``measure``, ``value``) from the statistics
    :func:`compute_signals_stage` returns."""
    return pl.DataFrame({"measure": list(THROUGHPUT_MEASURES.values()),
                         "value": [float(stats[k]) for k in THROUGHPUT_MEASURES]})
