"""The lexical retrievers of this workbench, each fitted per query on its candidate list.

* ``bm25``: Okapi BM25 (``bm25s``, Lucene variant):
  ``score(q, d) = sum_{t in q} idf(t) * tf(t,d) / (tf(t,d) + k1 (1 - b + b |d| / avgdl))``,
  ``idf(t) = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))``; tokens: ``bm25s.tokenize`` (lower case,
  ``\\w\\w+``, English stop words) unless a ``tokenizer`` is given.
* ``tfidf``: scikit-learn ``TfidfVectorizer`` (smooth idf, sublinear off, L2 rows);
  score = cosine(tfidf(q), tfidf(d)).
* ``jaccard``: ``|T(q) & T(d)| / |T(q) | T(d)|`` with ``saber_lib.core.text.summary_tokens`` as T.

``bm25`` and ``tfidf`` also serve the whole corpus (``indexes.BM25Index``, ``indexes.TfidfIndex``).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..core.text import summary_tokens
from ..signals.summary import jaccard
from .base import EmptyVocabulary, Retriever, Tokenizer, version
from .registry import register_retriever


class BM25Retriever(Retriever):
    """BM25 fitted per query on its candidates (``bm25s``, method "lucene")."""

    name = "bm25"

    def __init__(self, k1: float = 1.5, b: float = 0.75, tokenizer: Tokenizer | None = None):
        self.k1, self.b, self.tokenizer = float(k1), float(b), tokenizer
        self.backend = f"bm25s=={version('bm25s')} (k1={k1}, b={b})"

    def tokenize(self, texts: Sequence[str]) -> list[list[str]]:
        if self.tokenizer is not None:
            return [list(self.tokenizer(t)) for t in texts]
        import bm25s  # optional retriever package

        return bm25s.tokenize(list(texts), stopwords="en", return_ids=False, show_progress=False)

    def score(self, query, candidates):
        import bm25s  # optional retriever package

        candidates = list(candidates)
        if not candidates:
            return np.zeros(0)
        docs = self.tokenize(candidates)
        q = self.tokenize([query])[0]
        vocab = {t for d in docs for t in d}
        q = [t for t in q if t in vocab]
        if not q:
            return np.zeros(len(candidates))
        model = bm25s.BM25(k1=self.k1, b=self.b)
        model.index(docs, show_progress=False)
        return np.asarray(model.get_scores(q), dtype=np.float64)


class TfidfRetriever(Retriever):
    """TF-IDF cosine, the vectorizer fitted per query on its candidates (scikit-learn)."""

    name = "tfidf"

    def __init__(self, tokenizer: Tokenizer | None = None):
        self.tokenizer = tokenizer
        self.backend = f"scikit-learn=={version('scikit-learn')} TfidfVectorizer"

    def score(self, query, candidates):
        from sklearn.feature_extraction.text import TfidfVectorizer  # heavy: only the tfidf retriever needs it

        candidates = list(candidates)
        if not candidates:
            return np.zeros(0)
        kw = {"tokenizer": self.tokenizer, "lowercase": False, "token_pattern": None} if self.tokenizer else {}
        vec = TfidfVectorizer(**kw)
        try:
            D = vec.fit_transform(candidates)
        except ValueError:  # scikit-learn's empty vocabulary; all-zero scores would rank in list order
            raise EmptyVocabulary(f"tfidf: none of the {len(candidates)} candidates has a token (empty vocabulary; "
                                  f"first candidate {candidates[0][:60]!r}), so TF-IDF cannot rank them") from None
        Q = vec.transform([query])
        return np.asarray((D @ Q.T).toarray()).ravel().astype(np.float64)


def _default_set_tokens(text: str) -> frozenset:
    return summary_tokens(text)


class JaccardRetriever(Retriever):
    """Jaccard similarity of token sets (``saber_lib.core.text.summary_tokens`` unless a ``tokenizer`` is given)."""

    name = "jaccard"

    def __init__(self, tokenizer: Tokenizer | None = None, empty: float = 0.0):
        self.tokenizer = tokenizer or _default_set_tokens
        self.empty = empty
        self.backend = "token-set Jaccard (signals.summary_tokens)" if tokenizer is None else "token-set Jaccard"

    def score(self, query, candidates):
        qt = frozenset(self.tokenizer(query))
        return np.array([jaccard(qt, frozenset(self.tokenizer(c)), self.empty) for c in candidates],
                        dtype=np.float64)


@register_retriever("bm25", corpus_index="bm25", retriever_class="lexical",
                    summary="Okapi BM25 (`bm25s`, Lucene variant), `\\w\\w+` tokens, English stop words removed")
def _bm25(k1: float = 1.5, b: float = 0.75, tokenizer: Tokenizer | None = None) -> Retriever:
    """Okapi BM25 (``bm25s``, Lucene variant), fitted per query on its candidates."""
    return BM25Retriever(k1, b, tokenizer)


@register_retriever("tfidf", corpus_index="tfidf", retriever_class="lexical",
                    summary="TF-IDF cosine, scikit-learn `TfidfVectorizer` defaults")
def _tfidf(tokenizer: Tokenizer | None = None) -> Retriever:
    """TF-IDF cosine (scikit-learn ``TfidfVectorizer``), fitted per query on its candidates."""
    return TfidfRetriever(tokenizer)


@register_retriever("jaccard", retriever_class="lexical",
                    summary="Jaccard of token sets (`core.text.summary_tokens`, stop words removed)")
def _jaccard(tokenizer: Tokenizer | None = None) -> Retriever:
    """Jaccard similarity of token sets."""
    return JaccardRetriever(tokenizer)
