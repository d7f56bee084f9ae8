"""A retriever plugin: the share of the query's distinct words that a document contains.

Load it with ``--set 'run.plugins=[examples.plugins.word_overlap]'`` (from the project root) and
name it in ``evaluate.retrievers`` (or as the reranker of an open-corpus system, ``bm25>word-overlap``).
"""
import re

from saber_lib.retrieval import register_retriever

WORD = re.compile(r"[a-z0-9]+")


class WordOverlap:
    """``score(q, d) = |W(q) & W(d)| / |W(q)|`` with W the lowercase alphanumeric words (0 for a
    query without words)."""

    backend = "word overlap (examples/plugins/word_overlap.py)"

    def score(self, query, documents):
        q = set(WORD.findall(query.lower()))
        if not q:
            return [0.0] * len(documents)
        return [len(q & set(WORD.findall(d.lower()))) / len(q) for d in documents]


@register_retriever("word-overlap")
def make_word_overlap():
    """The share of the query's distinct words found in the document."""
    return WordOverlap()
