"""What gets indexed: one text per corpus document for each representation, and a content hash.

Representations of a document (the query side is always the query's problem statement unless a
caller asks otherwise):

* ``statement``: the problem statement alone;
* ``full``: ``retrievers.document_text(problem, solution)``;
* ``summary``: the core-idea summary (the "slogan") from the summaries stage, given as a frame
  ``doc_id, text``. A document without a usable summary (absent, null or blank) is indexed by its
  statement instead, so that every document stays findable; the count of such fallbacks is
  reported by :func:`representation_texts`.

The corpus hash is ``sha256`` over ``doc_id \\x1f text \\x1e`` for every document in order: any
change to the set of documents, their order or their text gives another hash, hence another index.
"""
from __future__ import annotations

import hashlib
from typing import Sequence

import polars as pl

from ..core.text import document_text

REPRESENTATIONS = ("statement", "full", "summary")


def summary_frame(summaries, column: str = "summary_text"):
    """``doc_id, text`` from the summaries artifact (``summary_text`` or ``core_idea``); rows marked
    ``failed`` are dropped."""
    if "text" in summaries.columns and column not in summaries.columns:
        return summaries.select("doc_id", "text")
    df = summaries
    if "failed" in df.columns:
        df = df.filter(~pl.col("failed").fill_null(False))
    return df.select(pl.col("doc_id"), pl.col(column).alias("text"))


def representation_texts(corpus, representation: str, summaries=None) -> tuple[list[str], list[str], int]:
    """(doc_ids, texts, n_fallback) for every corpus row, in corpus order.

    ``corpus``: frame with ``doc_id``, ``problem``, ``solution``. ``summaries``: frame ``doc_id,
    text`` (or the summaries artifact), needed for ``summary``. ``n_fallback`` counts documents of
    the summary representation indexed by their statement because they have no summary.
    """
    if representation not in REPRESENTATIONS:
        raise ValueError(f"unknown representation {representation!r}; known: {', '.join(REPRESENTATIONS)}")
    ids = corpus["doc_id"].to_list()
    problems = corpus["problem"].to_list()
    if representation == "statement":
        return ids, [p or "" for p in problems], 0
    if representation == "full":
        return ids, [document_text(p, s) for p, s in zip(problems, corpus["solution"].to_list())], 0
    if summaries is None:
        raise ValueError("the summary representation needs the summaries (a frame doc_id, text)")
    sf = summary_frame(summaries)
    by_id = {d: t for d, t in sf.iter_rows() if t is not None and str(t).strip()}
    texts, fallback = [], 0
    for d, p in zip(ids, problems):
        t = by_id.get(d)
        if t is None:
            t, fallback = p or "", fallback + 1
        texts.append(t)
    return ids, texts, fallback


def corpus_hash(doc_ids: Sequence[str], texts: Sequence[str]) -> str:
    """Content hash of an indexed collection (ids and texts, in order)."""
    if len(doc_ids) != len(texts):
        raise ValueError("one text per document id is needed")
    h = hashlib.sha256()
    for d, t in zip(doc_ids, texts):
        h.update(str(d).encode("utf-8"))
        h.update(b"\x1f")
        h.update(str(t).encode("utf-8"))
        h.update(b"\x1e")
    return h.hexdigest()
