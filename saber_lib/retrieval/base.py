"""The retriever interface: ``score(query, documents)`` (float64, higher = more relevant) and
``score_many`` over many queries (dense models embed all texts at once, run files score by ids),
and the wrapper that gives any object with ``score`` that interface."""
from __future__ import annotations

import numbers
from typing import Callable, Sequence

import numpy as np

from ..core.data import package_version

Tokenizer = Callable[[str], Sequence[str]]


class EmptyVocabulary(ValueError):
    """A TF-IDF vectorizer found no token in a query's candidate list."""


class ScoreError(ValueError):
    """Scores that are not one number per document (a plugin's retriever or judge), one line naming it."""


def checked_scores(values, n: int, who: str, what: str = "documents") -> np.ndarray:
    """``values`` as float64, once they are ``n`` real numbers (a sequence or a 1-d array; a string,
    a boolean or another count is a :class:`ScoreError` naming ``who``; NaN passes, for the caller's
    own policy)."""
    if isinstance(values, np.ndarray):
        if values.dtype.kind in "fiu" and values.shape == (n,):
            return values.astype(np.float64, copy=False)
        if values.ndim != 1:
            raise ScoreError(f"{who}: returned an array of shape {values.shape} for {n} {what}")
        values = values.tolist()
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise ScoreError(f"{who}: returned {type(values).__name__}, not a list of {n} scores")
    if len(values) != n:
        raise ScoreError(f"{who}: returned {len(values)} scores for {n} {what}")
    for k, v in enumerate(values):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (numbers.Real, np.number)):
            raise ScoreError(f"{who}: score {k + 1} of {n} is {v!r}, not a number")
    return np.asarray(values, dtype=np.float64)


def checked_lists(got, candidate_lists, who: str, query_ids=None) -> list[np.ndarray]:
    """What a ``score_many`` returned, checked: one list of scores per query (``who`` named otherwise),
    each of one number per candidate (:func:`checked_scores`)."""
    if isinstance(got, np.ndarray) and got.ndim == 2:
        got = list(got)
    if isinstance(got, (str, bytes)) or not isinstance(got, Sequence):
        raise ScoreError(f"{who}: score_many returned {type(got).__name__}, not one list of scores per query")
    if len(got) != len(candidate_lists):
        raise ScoreError(f"{who}: score_many returned {len(got)} score lists for {len(candidate_lists)} queries")
    return [checked_scores(s, len(c), f"{who}, query {query_ids[k] if query_ids is not None else k + 1}", "candidates")
            for k, (s, c) in enumerate(zip(got, candidate_lists))]


def score_lists(retriever: "Retriever", queries, candidate_lists, query_ids=None, candidate_ids=None) -> list[np.ndarray]:
    """``retriever.score_many`` checked (:func:`checked_lists`): the one place the stages that score
    many queries read a retriever's answers through."""
    got = retriever.score_many(queries, candidate_lists, query_ids=query_ids, candidate_ids=candidate_ids)
    return checked_lists(got, candidate_lists, getattr(retriever, "who", f"retriever {getattr(retriever, 'name', '?')!r}"), query_ids)


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

    def __init__(self, obj, name: str, module: str = ""):
        if not callable(getattr(obj, "score", None)):
            raise TypeError(f"retriever {name!r}: {type(obj).__name__} has no score(query, documents) method")
        self.obj, self.name = obj, name
        self.backend = str(getattr(obj, "backend", "") or f"{type(obj).__module__}.{type(obj).__qualname__}")
        self.who = f"retriever {name!r}" + (f" (module {module})" if module else "")

    def score(self, query, candidates):
        candidates = list(candidates)
        return checked_scores(self.obj.score(query, candidates), len(candidates), self.who)

    def score_many(self, queries, candidate_lists, query_ids=None, candidate_ids=None):
        many = getattr(self.obj, "score_many", None)
        if many is None:
            return super().score_many(queries, candidate_lists, query_ids, candidate_ids)
        if len(queries) != len(candidate_lists):
            raise ValueError("one candidate list per query is needed")
        lists = [list(c) for c in candidate_lists]
        return checked_lists(many(list(queries), lists), lists, self.who, query_ids)


def wrap(obj, name: str, *, where: str = "") -> Retriever:
    """``obj`` itself when it is a :class:`Retriever`, else :class:`Wrapped` (``where``: the module
    that made it, named in the error when it has no ``score``)."""
    if isinstance(obj, Retriever):
        return obj
    try:
        return Wrapped(obj, name, where)
    except TypeError as e:
        raise TypeError(f"{where}: {e}" if where else str(e)) from None


def version(dist: str) -> str:
    """The installed version of a distribution, ``?`` when it is not installed."""
    return package_version(dist) or "?"
