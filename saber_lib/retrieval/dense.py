"""Dense retrievers: every encoder of ``saber_lib.embed`` (``minilm``, ``mpnet``, ``e5-small``, ...)
scores by the cosine of the query vector (kind "query") and the document vectors (kind
"document"), embedded once through the store. Over the whole corpus they are served by
``indexes.ExactDenseIndex`` (and ``<encoder>@hnsw`` by ``indexes.HnswIndex``).
"""
from __future__ import annotations

import numpy as np

from .. import embed
from .base import Retriever
from .registry import register_retriever

# encoders that are one model (the same weights at another precision or in another runtime): a proxy
# judge on any of them judges with an evaluated retriever's own model
SAME_MODEL = {"minilm": "all-MiniLM-L6-v2", "minilm-bf16": "all-MiniLM-L6-v2", "minilm-int8": "all-MiniLM-L6-v2",
              "mpnet": "all-mpnet-base-v2", "mpnet-bf16": "all-mpnet-base-v2", "mpnet-int8": "all-mpnet-base-v2"}


class DenseRetriever(Retriever):
    """Cosine similarity of embeddings from ``saber_lib.embed`` (vectors are unit length)."""

    def __init__(self, encoder_name: str, store=None, max_chunks: int | None = None, cache_dir=None,
                 batch_size: int = 32):
        self.encoder = embed.get_encoder(encoder_name, max_chunks=max_chunks, cache_dir=cache_dir)
        self.store = store
        self.batch_size = batch_size
        self.name = encoder_name
        self.backend = self.encoder.model_id

    def score(self, query, candidates):
        return self.score_many([query], [list(candidates)])[0]

    def score_many(self, queries, candidate_lists, query_ids=None, candidate_ids=None, show_progress=False):
        if len(queries) != len(candidate_lists):
            raise ValueError("one candidate list per query is needed")
        Q = embed.embed(self.encoder, list(queries), self.store, kind="query",
                        show_progress=show_progress, batch_size=self.batch_size)
        flat = [c for cl in candidate_lists for c in cl]
        D = embed.embed(self.encoder, flat, self.store, kind="document",
                        show_progress=show_progress, batch_size=self.batch_size)
        out, s = [], 0
        for i, cl in enumerate(candidate_lists):
            out.append((D[s: s + len(cl)].astype(np.float64) @ Q[i].astype(np.float64)))
            s += len(cl)
        return out


def _dense(name: str, store=None, max_chunks: int | None = None, cache_dir=None) -> Retriever:
    return DenseRetriever(name, store=store, max_chunks=max_chunks, cache_dir=cache_dir)


for _encoder in embed.REGISTRY:
    register_retriever(_encoder, module=__name__, retriever_class="dense encoder",
                       model=SAME_MODEL.get(_encoder, _encoder), corpus_index="dense",
                       summary=f"cosine of `{_encoder}` embeddings ({embed.REGISTRY[_encoder].package.split()[0]})")(_dense)
