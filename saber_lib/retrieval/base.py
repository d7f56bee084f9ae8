"""The retriever interface: ``score(query, documents)`` (float64, higher = more relevant) and
``score_many`` over many queries (dense models embed all texts at once, run files score by ids),
and the wrapper that gives any object with ``score`` that interface."""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ..core.data import package_version

Tokenizer = Callable[[str], Sequence[str]]


class EmptyVocabulary(ValueError):
    """A TF-IDF vectorizer found no token in a query's candidate list."""


class Retriever:
    """Scores a query against its candidate list; higher is more relevant."""

    name = "retriever"
    backend = ""

    def score(self, query: str, candidates: Sequence[str]) -> np.ndarray:
        raise NotImplementedError

    def score_many(self, queries: Sequence[str], candidate_lists: Sequence[Sequence[str]],
                   query_ids: Sequence[str] | None = None,
                   candidate_ids: Sequence[Sequence[str]] | None = None) -> list[np.ndarray]:
        if len(queries) != len(candidate_lists):
            raise ValueError("one candidate list per query is needed")
        out = []
        for k, (q, c) in enumerate(zip(queries, candidate_lists)):
            try:
                out.append(np.asarray(self.score(q, list(c)), dtype=np.float64))
            except EmptyVocabulary as e:
                raise EmptyVocabulary(f"query {query_ids[k] if query_ids is not None else k}: {e}") from None
        return out

    def __call__(self, query: str, candidates: Sequence[str]) -> np.ndarray:
        return self.score(query, candidates)

    def info(self) -> dict:
        return {"name": self.name, "backend": self.backend}


class Wrapped(Retriever):
    """Any object with ``score(query, documents)`` (and optionally ``score_many(queries,
    document_lists)``) as a :class:`Retriever` named ``name``."""

    def __init__(self, obj, name: str):
        if not callable(getattr(obj, "score", None)):
            raise TypeError(f"retriever {name!r}: {type(obj).__name__} has no score(query, documents) method")
        self.obj, self.name = obj, name
        self.backend = str(getattr(obj, "backend", "") or f"{type(obj).__module__}.{type(obj).__qualname__}")

    def score(self, query, candidates):
        return np.asarray(self.obj.score(query, list(candidates)), dtype=np.float64)

    def score_many(self, queries, candidate_lists, query_ids=None, candidate_ids=None):
        many = getattr(self.obj, "score_many", None)
        if many is None:
            return super().score_many(queries, candidate_lists, query_ids, candidate_ids)
        if len(queries) != len(candidate_lists):
            raise ValueError("one candidate list per query is needed")
        return [np.asarray(s, dtype=np.float64) for s in many(list(queries), [list(c) for c in candidate_lists])]


def wrap(obj, name: str, *, where: str = "") -> Retriever:
    """``obj`` itself when it is a :class:`Retriever`, else :class:`Wrapped` (``where``: the module
    that made it, named in the error when it has no ``score``)."""
    if isinstance(obj, Retriever):
        return obj
    try:
        return Wrapped(obj, name)
    except TypeError as e:
        raise TypeError(f"{where}: {e}" if where else str(e)) from None


def version(dist: str) -> str:
    """The installed version of a distribution, ``?`` when it is not installed."""
    return package_version(dist) or "?"
