"""The two selection signals of chosen (query, candidate) pairs, computed as the signals stage
computes them for all pairs (:func:`saber_lib.signals.stage.compute_signals_stage`): topic
similarity is the BMA of Lin similarities with the information content taken over the whole
corpus's topic annotations (a failed topic annotation is an empty set: similarity 0), summary
similarity the Jaccard of the summaries' token sets (``jaccard_empty`` between two empty sets).
For a few hundred pairs this is quicker than reading them back from the stored histograms, and it
also covers pairs below the stage's storage floors."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import polars as pl

from ..core.text import summary_tokens
from .summary import jaccard
from .topic import bma_many, topic_sets


class PairSignals:
    """Signal values of (query, candidate) pairs of one run's corpus.

    ``corpus_ids``: the corpus's doc ids in corpus order; ``topics`` / ``summaries``: the topics and
    summaries stages' tables; ``ontology``: the tree (``ontology.ontology_from_nodes``)."""

    def __init__(self, corpus_ids: Sequence[str], topics: pl.DataFrame, summaries: pl.DataFrame, ontology,
                 jaccard_empty: float = 0.0):
        ids = list(corpus_ids)
        tmap = dict(zip(topics["doc_id"].to_list(),
                        [[] if f else list(ns or []) for ns, f in zip(topics["node_ids"].to_list(),
                                                                         topics["failed"].to_list())]))
        self.sets = topic_sets(ontology, [tmap.get(d, []) for d in ids])
        self.row = {d: i for i, d in enumerate(ids)}
        self.summary_text = dict(zip(summaries["doc_id"].to_list(), summaries["summary_text"].to_list()))
        self.jaccard_empty = float(jaccard_empty)

    def _rows(self, ids: Sequence[str]) -> np.ndarray:
        missing = [d for d in ids if d not in self.row]
        if missing:
            raise KeyError(f"{len(missing)} ids are not in the run's corpus, e.g. {missing[0]!r}")
        return np.array([self.row[d] for d in ids], dtype=np.int64)

    def topic(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """Topic similarity (BMA) of each (x, y) pair, float64."""
        if not pairs:
            return np.zeros(0)
        xs, ys = zip(*pairs)
        s = self.sets.sets
        return bma_many(self.sets.lin, s.take(self._rows(xs)), s.take(self._rows(ys))).astype(np.float64)

    def summary(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """Summary similarity (Jaccard of summary tokens) of each (x, y) pair."""
        self._rows([d for p in pairs for d in p])
        tok = {d: summary_tokens(self.summary_text.get(d)) for p in pairs for d in p}
        return np.array([jaccard(tok[x], tok[y], empty=self.jaccard_empty) for x, y in pairs], dtype=np.float64)
