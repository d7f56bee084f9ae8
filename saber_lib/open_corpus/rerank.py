"""Second stage: rescore a first-stage candidate list with any retriever.

``rerank`` takes per query the first stage's ranked document ids and lets a
``retrievers.Retriever`` score them (a dense model, BM25 fitted on the list, a TREC run, or the
LLM reranker below); the new order is by descending reranker score, ties kept in first-stage order.

:class:`LLMPointwiseReranker` asks a backend of the LLM layer to rate each (query, candidate)
pair 0..5 and uses the rating as the score. Answers go through ``llm.run_with_parser``: an answer
without a rating is asked again (``retries``) and never kept in the LLM cache; a pair still
unrated scores -1 (below every rated candidate) and is counted in ``failures``.
"""
from __future__ import annotations

import re
from typing import Callable, Mapping, Sequence

import numpy as np

from ..llm.retry import run_with_parser
from ..llm.types import ChatRequest, Failure, ParseError
from ..retrieval.base import Retriever, score_lists


def rerank(reranker: Retriever, query_ids: Sequence[str], query_texts: Sequence[str],
           candidates: Sequence[Sequence[str]], doc_texts: Mapping[str, str],
           n: int | None = None) -> list[list[tuple[str, float]]]:
    """Per query: [(doc_id, reranker score)] best first, over the first ``n`` candidates."""
    cand = [list(c)[:n] if n else list(c) for c in candidates]
    texts = [[doc_texts[d] for d in c] for c in cand]
    scores = score_lists(reranker, list(query_texts), texts, query_ids=list(query_ids), candidate_ids=cand)
    out = []
    for c, s in zip(cand, scores):
        order = np.lexsort((np.arange(len(c)), -s))
        out.append([(c[i], float(s[i])) for i in order])
    return out


_RATING = re.compile(r"(?<![\d.])([0-5])(?![\d.])")

PROMPT = ("You rate how useful a mathematics problem is to someone working on another problem.\n\n"
          "Query problem:\n{query}\n\nCandidate problem:\n{candidate}\n\n"
          "Reply with one digit from 0 (unrelated) to 5 (same core idea or method).")


def parse_rating(text: str | None) -> float:
    """The first lone digit 0..5 of an answer; ParseError when there is none."""
    m = _RATING.search(text or "")
    if m is None:
        raise ParseError("no rating 0..5 in the answer")
    return float(m.group(1))


class LLMPointwiseReranker(Retriever):
    """Pointwise LLM reranker: score = the 0..5 rating the model gives each candidate (module
    docstring). ``make_request`` turns the message list into the backend's request (default: a
    plain ``ChatRequest``)."""

    name = "llm-pointwise"

    def __init__(self, backend, make_request: Callable[[list[dict]], ChatRequest] | None = None,
                 prompt: str = PROMPT, max_chars: int = 4000, retries: int = 1):
        self.backend, self.prompt, self.max_chars, self.retries = backend, prompt, max_chars, retries
        self.make_request = make_request or (lambda messages: ChatRequest(messages=messages))
        self.backend_name = getattr(backend, "name", type(backend).__name__)
        self.failures = 0

    def info(self) -> dict:
        return {"name": self.name, "backend": str(self.backend_name)}

    def score(self, query, candidates):
        return self.score_many([query], [list(candidates)])[0]

    def score_many(self, queries, candidate_lists, query_ids=None, candidate_ids=None):
        reqs, owner = [], []
        for i, (q, cl) in enumerate(zip(queries, candidate_lists)):
            for c in cl:
                content = self.prompt.format(query=q[: self.max_chars], candidate=c[: self.max_chars])
                reqs.append(self.make_request([{"role": "user", "content": content}]))
                owner.append(i)
        got = run_with_parser(self.backend, reqs, parse_rating, retries=self.retries, desc="LLM rerank") if reqs else []
        out = [np.zeros(len(cl)) for cl in candidate_lists]
        pos = [0] * len(candidate_lists)
        for i, g in zip(owner, got):
            self.failures += isinstance(g, Failure)
            out[i][pos[i]] = -1.0 if isinstance(g, Failure) else g
            pos[i] += 1
        return out
