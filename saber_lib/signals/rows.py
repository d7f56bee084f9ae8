"""Which corpus rows the selection may use, and their domains (from the ``topics`` and
``summaries`` tables)."""
from __future__ import annotations

import numpy as np
import polars as pl


def usable_rows(doc_ids, topics, summaries) -> np.ndarray:
    """Problems that can be queries or candidates: topics assigned (not failed, at least one) and a
    summary (not failed, a core idea). The authors drop problems without a core idea from selection."""
    t_ok = {d for d, ns, f in zip(topics["doc_id"].to_list(), topics["node_ids"].to_list(),
                                  topics["failed"].to_list()) if not f and ns}
    s_ok = {d for d, f, nc, txt in zip(summaries["doc_id"].to_list(), summaries["failed"].to_list(),
                                       summaries["no_core_idea"].to_list(), summaries["summary_text"].to_list())
            if not f and not nc and txt}
    return np.array([d in t_ok and d in s_ok for d in doc_ids], dtype=bool)


def query_domains_for(doc_ids, topics) -> list:
    """Each row's domains (from ``topics/topics.parquet``), aligned to ``doc_ids``."""
    m = dict(zip(topics["doc_id"].to_list(), topics["domains"].to_list()))
    return [list(m.get(d) or []) for d in doc_ids]


def stage_rows(ctx, doc_ids) -> tuple[np.ndarray, list]:
    """(:func:`usable_rows`, :func:`query_domains_for`) of ``doc_ids`` from the ``topics`` and
    ``summaries`` stages of the run ``ctx`` (a stage context; both stages must be declared inputs)."""
    topics = pl.read_parquet(ctx.input("topics", "topics.parquet"))
    summaries = pl.read_parquet(ctx.input("summaries", "summaries.parquet"))
    return usable_rows(doc_ids, topics, summaries), query_domains_for(doc_ids, topics)
