"""The ``retriever:<name>`` judge kind: a registered retriever as a pairwise judge.

The candidate that the retriever (``retrieval.registry``: bm25, the authors' ``-a0`` baselines,
approach0, an encoder, a plugin's) scores higher for the query's whole text (problem + solution)
wins; margin = the score difference; ``candidate_scores`` gives the scores themselves. A lexical
retriever is fitted on the query's documents among the items judged (a tournament round, a
judge-check call: every candidate of the query); a later call that brings new documents of the query
refits on all of them.

A measuring device for judge studies (``saber judge-check --fidelity``): a judge made of an evaluated
retriever rates the benchmark with a system it ranks, and it favours that system, so it may not rate
a benchmark that evaluates that retriever (``tournament.judge``; a blend holding it neither).
"""
from __future__ import annotations

from ..retrieval.base import checked_scores
from ..retrieval.registry import circular_judge, get_retriever, retriever_name_error
from .judge_base import _id, _text
from .registry import register_judge
from .spec_judges import Answers, _AnswersJudge, margin_labels


class RetrieverJudge(_AnswersJudge):
    """The candidate the retriever ``name`` scores higher for the query's whole text wins (module
    docstring, ``retriever:<name>``); ``candidate_scores`` gives the scores themselves."""

    def __init__(self, name: str, *, store=None, cache_dir=None):
        super().__init__()
        self.retriever = get_retriever(name, store=store, cache_dir=cache_dir)
        self.retriever_name = name
        self.name = f"retriever {name} (query: problem + solution)"
        self._docs: dict[str, dict] = {}        # query id -> {doc id: text} it was fitted on
        self._scores: dict[str, dict] = {}      # query id -> {doc id: score}

    def _fit(self, pairs) -> None:
        new: dict[str, tuple] = {}
        for q, c in pairs:
            qid, cid = _id(q), _id(c)
            if cid not in self._docs.get(qid, {}):
                new.setdefault(qid, (_text(q), {}))[1][cid] = _text(c)
        for qid, (qtext, docs) in new.items():
            every = {**self._docs.get(qid, {}), **docs}
            scores = checked_scores(self.retriever.score(qtext, list(every.values())), len(every),
                                    f"retriever {self.retriever_name!r}")
            self._docs[qid], self._scores[qid] = every, dict(zip(every, map(float, scores)))

    def candidate_scores(self, items) -> list[float]:
        """The retriever's score of each ``(query, candidate)``."""
        items = list(items)
        self._fit(items)
        return [self._scores[_id(q)][_id(c)] for q, c in items]

    def answers(self, items):
        items = list(items)
        self._fit([(q, x) for q, a, b in items for x in (a, b)])
        m = [self._scores[_id(q)][_id(a)] - self._scores[_id(q)][_id(b)] for q, a, b in items]
        return Answers(margin_labels(m), [float(x) for x in m], self.name)



def _retriever_check(arg):
    if not arg:
        return "name a registered retriever (retriever:<name>)"
    if arg.startswith("run:"):
        return "a TREC run file scores query ids, not the texts a judge compares"
    err = retriever_name_error(arg)
    return f"unknown retriever: {err}" if err else None


def _retriever_rating_check(arg, values):
    same = circular_judge(arg, values["evaluate"]["retrievers"] or [])
    if same is None:
        return None
    model = "" if same == arg else ", the same model"
    return (f"the judge retriever:{arg} is an evaluated retriever ({same!r}{model}, in evaluate.retrievers): a judge "
            f"built on it would favour it; it is for judge studies (saber judge-check)")


@register_judge("retriever", context=True, check=_retriever_check, usage="retriever:<name>",
                rating_check=_retriever_rating_check)
def _retriever(arg, ctx):
    st = ctx.settings
    if ctx.rates_benchmark and st.evaluated and circular_judge(arg, st.evaluated):
        raise ValueError(_retriever_rating_check(arg, {"evaluate": {"retrievers": list(st.evaluated)}}))
    return RetrieverJudge(arg, store=ctx.store, cache_dir=st.cache_dir)
