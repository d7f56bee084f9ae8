"""The lexical baselines as the SABER-Math authors ran them: their tokenizations and their BM25.

Two tokenizations of a text (docs/retrievers.md, "The authors' lexical baselines"):

* :func:`a0_tokens` (retrievers ``bm25-a0``, ``tfidf-a0``, ``jaccard-a0``): every LaTeX block
  (``$$..$$``, ``$..$``, ``\\(..\\)``, ``\\[..\\]``; shortest match, a block may be empty) goes
  through Approach Zero's lexer ``pya0.tokenize``; the text outside the blocks is lowercased and cut
  into maximal runs of ASCII letters standing as whole words (``\\b[a-zA-Z]+\\b``: ``x2`` or
  ``a_b`` give nothing). The list is the math tokens of all blocks in order, then the words. No stop
  word is removed.
* :func:`ws_tokens` (``bm25-ws``, ``jaccard-ws``): the lowercased text split on whitespace.
  ``tfidf-ws`` is scikit-learn's own analyzer (lowercase, ``\\b\\w\\w+\\b``), which is what the
  authors' TF-IDF without math tokenization uses.

**What the authors' helper does with pya0 0.3.7.** ``pya0.tokenize`` returns one
``(id, kind, text)`` tuple per token, e.g. ``x^2+1`` gives ``(260, 'VAR', "normal`x'"), (275,
'SUPSCRIPT', ...), (259, 'NUM', "`2'"), (261, 'ADD', 'plus'), (259, 'ONE', "`1'")``. The
helper keeps a string token as it is and turns any other token into ``str(token[0])``; since every
token is a tuple, every math token becomes the numeric id of its lexical class: ``x^2+1`` becomes
``["260", "275", "259", "261", "259"]``, exactly like ``y^3+7``. So on the ``-a0`` retrievers the
mathematics only contributes the *shape* of its formulas (how many variables, numbers, operators,
fractions, roots, ...), never which variable, number or symbol it is; ``=`` and ``\\le`` share one
id, ``1`` and ``2`` another, all Greek and Latin letters another. The ids are digit strings, so they
never collide with the (purely alphabetic) words. The ``-a0`` retrievers keep this behaviour on
purpose: it is the authors' protocol (what their published numbers measure), not a design choice
of this workbench; ``approach0`` and the math-vs-words tokens use the token texts instead.

:func:`okapi_scores`: ``rank_bm25.BM25Okapi`` with its default parameters (k1 = 1.5, b = 0.75,
epsilon = 0.25: a term in more than half of the documents gets ``epsilon`` times the mean idf
instead of its negative idf), fitted on the given documents (a query's own candidates).

:data:`PUBLISHED_COUNTERPART`: each retriever here -> the name of the same system in the authors'
published results (``results/evaluation/<name>__p0.json``).

The six retrievers are registered here (``bm25-a0`` ... ``jaccard-ws``).
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Sequence

import numpy as np
from rank_bm25 import BM25Okapi

from .base import Retriever, Tokenizer, version
from .lexical import JaccardRetriever, TfidfRetriever
from .registry import register_retriever

#: ours -> the authors' published system name (their ``-no-tok`` rows are our ``-ws`` ones).
PUBLISHED_COUNTERPART = {"bm25-a0": "bm25", "tfidf-a0": "tf-idf", "jaccard-a0": "jaccard",
                         "bm25-ws": "bm25-no-tok", "tfidf-ws": "tf-idf-no-tok", "jaccard-ws": "jaccard-no-tok"}

# the four block kinds, shortest match, empty content allowed, across lines
MATH_BLOCK_RE = re.compile(r"\$\$(.*?)\$\$|\$(.*?)\$|\\\((.*?)\\\)|\\\[(.*?)\\\]", re.S)
ALPHA_WORD_RE = re.compile(r"\b[a-zA-Z]+\b")

OKAPI_DEFAULTS = {"k1": 1.5, "b": 0.75, "epsilon": 0.25}


def math_blocks(text: str) -> list[str]:
    """The contents of the LaTeX blocks of ``text``, in order (delimiters removed, possibly empty)."""
    return [next(g for g in m.groups() if g is not None) for m in MATH_BLOCK_RE.finditer(text or "")]


@lru_cache(maxsize=200_000)
def _block_tokens(block: str) -> tuple[str, ...]:
    import pya0  # optional, heavy: Approach Zero (native library)

    try:
        raw = pya0.tokenize(block)
    except Exception as e:  # the native lexer's errors have no common type
        raise ValueError(f"Approach Zero's lexer failed on the math block {block[:80]!r}: {e}") from None
    # the authors' helper: a string token stays, any other becomes str(token[0]), its class id
    return tuple(t if isinstance(t, str) else str(t[0]) for t in raw)


def a0_tokens(text: str) -> list[str]:
    """The authors' math-and-words tokens of ``text`` (module docstring): math blocks through
    ``pya0.tokenize`` (each token its class id), then the lowercase alphabetic words of the rest."""
    text = text or ""
    toks = [t for block in math_blocks(text) for t in _block_tokens(block)]
    return toks + ALPHA_WORD_RE.findall(MATH_BLOCK_RE.sub(" ", text).lower())


def ws_tokens(text: str) -> list[str]:
    """The lowercased text split on whitespace."""
    return (text or "").lower().split()


def okapi_scores(query_tokens: Sequence[str], doc_tokens: Sequence[Sequence[str]]) -> np.ndarray:
    """``rank_bm25.BM25Okapi`` (default parameters) fitted on ``doc_tokens``, scores of the query.

    All zeros when the query has no token (the authors' rule) or no document has one (rank_bm25
    would divide by zero)."""
    n = len(doc_tokens)
    if n == 0 or not query_tokens or not any(len(d) for d in doc_tokens):
        return np.zeros(n)
    model = BM25Okapi([list(d) for d in doc_tokens], **OKAPI_DEFAULTS)
    return np.asarray(model.get_scores(list(query_tokens)), dtype=np.float64)


class OkapiBM25Retriever(Retriever):
    """The authors' BM25: ``rank_bm25.BM25Okapi`` (defaults) fitted per query on its candidates."""

    def __init__(self, name: str, tokenizer: Tokenizer, tokens: str):
        self.name, self.tokenizer = name, tokenizer
        self.backend = f"rank-bm25=={version('rank-bm25')} BM25Okapi (defaults) on {tokens}"

    def score(self, query, candidates):
        return okapi_scores(self.tokenizer(query), [self.tokenizer(c) for c in candidates])


def _authors_lexical(name: str) -> Retriever:
    """The authors' lexical baseline ``<bm25|tfidf|jaccard>-<a0|ws>``."""
    kind, tok = name.split("-")
    tokens = "Approach Zero class ids + words" if tok == "a0" else "whitespace tokens"
    tokenize = a0_tokens if tok == "a0" else ws_tokens
    if kind == "bm25":
        return OkapiBM25Retriever(name, tokenize, tokens)
    if kind == "tfidf":   # -ws: scikit-learn's own analyzer, the authors' TF-IDF without math tokens
        r = TfidfRetriever(tokenize if tok == "a0" else None)
        r.backend += f" on {tokens if tok == 'a0' else 'its default tokens'}"
    else:
        r = JaccardRetriever(tokenize)
        r.backend += f" on {tokens}"
    r.name = name
    return r


for _name in PUBLISHED_COUNTERPART:   # bm25-a0, tfidf-a0, jaccard-a0, bm25-ws, tfidf-ws, jaccard-ws
    register_retriever(_name, module=__name__, retriever_class="lexical",
                       summary=f"the authors' {_name.split('-')[0]} on "
                       + ("Approach Zero class ids + words" if _name.endswith("a0") else "whitespace tokens"))(_authors_lexical)
