"""Whole-corpus retrieval with the registered retrievers' indexes (:mod:`.indexes`, cached by
:mod:`.index_cache`): the first stage of the open-corpus track (:class:`CorpusEngine`: builds or
loads one index per system and representation, searches top-k) and every document's score for a
query (:func:`corpus_scores`, the rephrased-copy rank's corpus pool). Which index serves a name is
the registry's ``corpus_index`` of its entry.
"""
from __future__ import annotations

import time

import numpy as np

from .. import embed
from . import indexes
from .base import version
from .index_cache import cached_index
from .registry import corpus_index, first_stage_names

SCORED_KINDS = ("bm25", "tfidf", "dense")   # the index kinds that give every document's score


class CorpusEngine:
    """Builds (or loads) indexes and runs first-stage searches, sharing encoders and vectors."""

    def __init__(self, cache_dir, store, embed_max_chunks, bm25_k1, bm25_b, hnsw_params, batch_size=32):
        self.cache_dir, self.store, self.max_chunks = cache_dir, store, embed_max_chunks
        self.k1, self.b, self.hnsw = bm25_k1, bm25_b, dict(hnsw_params)
        self.batch_size = batch_size
        self._indexes: dict = {}
        self.info: dict = {}

    def _encoder(self, name):
        return embed.get_encoder(name, max_chunks=self.max_chunks, cache_dir=self.cache_dir)

    def index(self, system: str, rep: str, doc_ids, texts, chash):
        key = (system, rep)
        if key in self._indexes:
            return self._indexes[key]
        t0 = time.perf_counter()
        kind = corpus_index(system.split("@", 1)[0])
        if kind == "bm25":
            model = f"bm25s=={version('bm25s')}"
            params = {"k1": self.k1, "b": self.b}
            index, info = cached_index(self.cache_dir, "bm25", model, rep, chash,
                                          lambda: indexes.BM25Index.build(doc_ids, texts, self.k1, self.b), params)
        elif kind == "tfidf":
            model = f"scikit-learn=={version('scikit-learn')}"
            index, info = cached_index(self.cache_dir, "tfidf", model, rep, chash,
                                          lambda: indexes.TfidfIndex.build(doc_ids, texts))
        elif kind == "approach0":
            model = f"pya0=={version('pya0')}"
            index, info = cached_index(self.cache_dir, "approach0", model, rep, chash,
                                          lambda: indexes.Approach0Index.build(doc_ids, texts))
        elif kind == "dense":
            enc_name, ann = (system.split("@", 1) + [None])[:2]
            enc = self._encoder(enc_name)
            model = enc.model_id + (f" ({ann})" if ann else " (exact)")

            def vectors():
                return embed.embed(enc, texts, self.store, kind="document", batch_size=self.batch_size)

            exact, info = cached_index(self.cache_dir, "dense-exact", enc.model_id, rep, chash,
                                          lambda: indexes.ExactDenseIndex.build(doc_ids, vectors()))
            if ann is None:
                index = exact
            elif ann == "hnsw":
                p = {"M": self.hnsw["M"], "ef_construction": self.hnsw["ef_construction"]}
                index, info = cached_index(self.cache_dir, "dense-hnsw", enc.model_id, rep, chash,
                                              lambda: indexes.HnswIndex.build(doc_ids, exact.vectors, ef=self.hnsw["ef"], **p),
                                              p, load_kwargs={"ef": self.hnsw["ef"]})
                index.ef = self.hnsw["ef"]
            else:
                raise ValueError(f"unknown approximate index {ann!r} in {system!r}; known: hnsw")
        else:
            raise ValueError(f"{system!r} does not retrieve from the whole corpus; use one of {', '.join(first_stage_names())}")
        if list(index.doc_ids) != list(doc_ids):
            raise RuntimeError(f"cached index for {system}/{rep} lists other documents; delete {info['path']}")
        info = dict(info, seconds=time.perf_counter() - t0, model=model)
        self.info[f"{system}/{rep}"] = info
        self._indexes[key] = index
        return index

    def search(self, system, rep, doc_ids, texts, chash, query_texts, k):
        index = self.index(system, rep, doc_ids, texts, chash)
        if corpus_index(system.split("@", 1)[0]) != "dense":
            return index.search(query_texts, k)

        enc = self._encoder(system.split("@", 1)[0])
        Q = embed.embed(enc, list(query_texts), self.store, kind="query", batch_size=self.batch_size)
        return index.search(Q, k)


def corpus_scores(system: str, ids, texts, qtexts, *, store, cache_dir, max_chunks, k1, b, batch_size):
    """A function query index -> scores of every document (ids, texts) for ``system``."""
    kind = corpus_index(system)
    if kind == "bm25":
        ix = indexes.BM25Index.build(ids, texts, k1, b)
        return lambda i: ix.scores(qtexts[i])
    if kind == "tfidf":
        ix = indexes.TfidfIndex.build(ids, texts)
        Q = ix.vectorizer.transform(list(qtexts)).astype(np.float32)
        return lambda i: (Q[i] @ ix.postings).toarray().ravel().astype(np.float64)
    if kind == "dense":
        enc = embed.get_encoder(system, max_chunks=max_chunks, cache_dir=cache_dir)
        D = embed.embed(enc, list(texts), store, kind="document", batch_size=batch_size).astype(np.float64)
        Q = embed.embed(enc, list(qtexts), store, kind="query", batch_size=batch_size).astype(np.float64)
        return lambda i: D @ Q[i]
    able = [n for n in first_stage_names() if corpus_index(n) in SCORED_KINDS]
    raise KeyError(f"robustness.rr_corpus_systems: {system!r} cannot rank the whole corpus; use one of {', '.join(able)}")
