"""Pairwise relevance judges behind one interface (paper 3.5, App. B.4/C.1).

A judge answers "which of two candidates is closer to the query in mathematical ideas and
techniques?"::

    judge.judge(query, a, b)            -> 1 | 2 | TIE | Failure(reason)
    judge.judge_pairs([(q, a, b), ...]) -> [outcome, ...]      # the batched form

``1`` means the candidate shown first (``a``), ``2`` the one shown second, ``TIE`` (0) only where a
judge can abstain (position-swapped disagreement, majority margin <= 1, equal ordinal scores or
equal similarities). ``Failure`` (from ``saber_lib.llm.types``, falsy) carries the reason; an
unparseable answer is retried and then recorded as a failure, never guessed.

``query``, ``a``, ``b`` are :class:`saber_lib.judging.tournament.Doc` (id + text) or plain strings.

Judges:

* :class:`LLMJudge` - the paper's judge via ``saber_lib.llm`` (prompt ``pairwise_judge``, last
  ``\\boxed{1|2}``), or log-probability mode for small local models (``log P("1")`` vs
  ``log P("2")`` after a ``\\boxed{`` prefill).
* :class:`SwappedJudge` - asks both orders; disagreement -> tie or re-ask; reports position bias.
* :class:`OrdinalJudge` - a 0-100 score per candidate (``ordinal_judge``), the higher wins.
* :class:`MajorityJudge` - k votes, tie when the vote margin is at most 1.
* :class:`ProxyJudge` - CPU proxy: cosine of query and candidate embeddings (not the paper's judge).
* :class:`SimulatedJudge` - latent strengths, ``P(a beats b) = sigmoid(scale * (s_a - s_b))``.
"""
from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Sequence

import numpy as np

from .. import embed, prompts
from ..retrieval.registry import circular_judge
from ..llm import run_with_parser
from ..llm.retry import logprob_pairwise_margins, margin_verdict
from ..llm.types import Failure
from .judge_base import Judge, _id, _text
from .outcomes import TIE, flip, is_failure


# ============================================================================ LLM judges
def _ps(x) -> tuple[str, str]:
    """(problem, solution) of a Doc; a plain string is all problem."""
    if isinstance(x, str):
        return x, ""
    return x.problem, x.solution or ""


def _pair_fields(q, a, b) -> dict:
    (qp, qs), (p1, s1), (p2, s2) = _ps(q), _ps(a), _ps(b)
    return dict(query_problem=qp, query_solution=qs, problem_1=p1, solution_1=s1, problem_2=p2, solution_2=s2)


class LLMJudge(Judge):
    """The pairwise LLM judge (paper App. B.4): prompt ``pairwise_judge`` (query, first and second
    candidate, each problem + solution); the answer is the last ``\\boxed{1}`` or ``\\boxed{2}``
    (``parse_boxed_choice``); unparseable or failed calls are asked again (``retries`` new calls,
    ``saber_lib.llm.run_with_parser``), then recorded as ``Failure``.

    ``logprob=True`` (small local models): prompt ``pairwise_judge_logprob`` (prefilled up to
    ``\\boxed{``) and ``backend.choice_logprobs``: the first candidate wins when
    ``log P("1") > log P("2")``. With ``both_orders`` (default in this mode) both presentations are
    scored and their margins summed, which cancels position bias; equal -> tie. Either way through
    ``saber_lib.llm.logprob_pairwise``: an answer that shows neither option is asked again
    (``retries``) and not kept in the cache.
    ``vote``: index of an independent sample (its requests carry ``attempt = 1000 * vote``, so they
    are new calls with their own seed and cache entries).
    """

    def __init__(self, backend, retries: int = 2, logprob: bool = False, both_orders: bool = True,
                 vote: int = 0):
        super().__init__()
        self.backend = backend
        self.retries = retries
        self.logprob = logprob
        self.both_orders = both_orders
        self.vote = vote
        self.model_name = getattr(backend, "model_id", None) or type(backend).__name__
        mode = ("-logprob2" if both_orders else "-logprob") if logprob else ""
        self.name = f"llm{mode}:{self.model_name}"

    def variant(self, k: int) -> "LLMJudge":
        return LLMJudge(self.backend, self.retries, self.logprob, self.both_orders, vote=k)

    def _request(self, prompt, q, a, b):
        req = prompts.request(prompt, meta={"query": _id(q), "first": _id(a), "second": _id(b)},
                              **_pair_fields(q, a, b))
        return replace(req, attempt=1000 * self.vote) if self.vote else req

    def judge_pairs(self, items):
        items = list(items)
        if not items:
            return []
        if not self.logprob:
            reqs = [self._request("pairwise_judge", q, a, b) for q, a, b in items]
            got = run_with_parser(self.backend, reqs, prompts.parser("pairwise_judge"), retries=self.retries,
                                  desc="pairwise judge")
            return self._count([g if is_failure(g) else int(g) for g in got])
        got = self.pair_margins(items)
        return self._count([g if is_failure(g) else {"a": 1, "b": 2, "tie": TIE}[margin_verdict(g)] for g in got])

    def pair_margins(self, items) -> list:
        """Log-probability mode: each pair's summed margin (> 0 favours the first candidate; NaN when
        undefined) or a Failure, the evidence behind :meth:`judge_pairs`'s verdicts (the same requests,
        asked once)."""
        if not self.logprob:
            raise ValueError("pair margins exist in log-probability mode only (logprob=True)")
        ab = [self._request("pairwise_judge_logprob", q, a, b) for q, a, b in items]
        ba = [self._request("pairwise_judge_logprob", q, b, a) for q, a, b in items] if self.both_orders else None
        return logprob_pairwise_margins(self.backend, ab, ba, desc="pairwise judge (log-prob)", retries=self.retries)


class OrdinalJudge(Judge):
    """Ordinal judge (paper App. C.1): each candidate gets a 0-100 relevance score from the
    ``ordinal_judge`` prompt (last ``\\boxed{N}``, ``parse_boxed_int(0, 100)``, retried, then
    Failure); a pair goes to the higher score, equal scores -> tie. Each (query, candidate) is
    scored once per judge and remembered (``scores``). ``score_only=True`` (small local models, the
    profile's ``llm.logprob_judge``): prompt ``ordinal_judge_score``, the same rubric answered with
    the score alone right after a ``\\boxed{`` prefill, without the written notes."""

    def __init__(self, backend, retries: int = 2, score_only: bool = False):
        super().__init__()
        self.backend = backend
        self.retries = retries
        self.prompt = "ordinal_judge_score" if score_only else "ordinal_judge"
        self.model_name = getattr(backend, "model_id", None) or type(backend).__name__
        self.name = f"llm-ordinal:{self.model_name}"
        self.scores: dict[tuple, object] = {}

    @staticmethod
    def _key(q, c):
        return (_id(q), _id(c))

    def score(self, pairs: Sequence[tuple]) -> list:
        """Scores (int 0..100 or Failure) of (query, candidate) pairs; only new ones are asked."""
        todo = {}
        for q, c in pairs:
            k = self._key(q, c)
            if k not in self.scores and k not in todo:
                todo[k] = (q, c)
        if todo:
            reqs = []
            for q, c in todo.values():
                (qp, qs), (p, so) = _ps(q), _ps(c)
                reqs.append(prompts.request(self.prompt, query_problem=qp, query_solution=qs, problem=p,
                                            solution=so, meta={"query": _id(q), "candidate": _id(c)}))
            got = run_with_parser(self.backend, reqs, prompts.parser(self.prompt), retries=self.retries,
                                  desc="ordinal judge")
            self.scores.update(zip(todo, got))
        return [self.scores[self._key(q, c)] for q, c in pairs]

    def judge_pairs(self, items):
        items = list(items)
        sa = self.score([(q, a) for q, a, _ in items])
        sb = self.score([(q, b) for q, _, b in items])
        out = []
        for x, y in zip(sa, sb):
            if is_failure(x) or is_failure(y):
                out.append(x if is_failure(x) else y)
            else:
                out.append(1 if x > y else 2 if y > x else TIE)
        return self._count(out)


# ============================================================================ combinators
class SwappedJudge(Judge):
    """Ask ``inner`` about both orders (a, b) and (b, a) in one batch.

    Both agree -> that choice (``consistent`` True). They disagree (the answer followed the
    position, not the candidate) -> ``TIE`` with ``disagreement='tie'``, or with ``'reask'`` one more
    judgment from an independent sample ``inner.variant(1)`` in the original order decides
    (a failure there -> tie). One order failed -> the other order's answer (``consistent`` None).
    After each batch ``last_consistency`` lists True/False/None per item.
    ``position_bias_rate`` = inconsistent pairs / pairs answered in both orders;
    ``first_position_rate`` = share of answers (both orders) that chose the first-shown candidate.
    """

    def __init__(self, inner: Judge, disagreement: str = "tie"):
        super().__init__()
        if disagreement not in ("tie", "reask"):
            raise ValueError(f"tournament.swap_disagreement: {disagreement!r} is not 'tie' or 'reask'")
        self.inner = inner
        self.disagreement = disagreement
        self.name = f"{inner.name}+swap({disagreement})"
        self.last_consistency: list = []

    def judge_pairs(self, items):
        items = list(items)
        both = self.inner.judge_pairs(items + [(q, b, a) for q, a, b in items])
        fwd, bwd = both[: len(items)], both[len(items):]
        out, cons, reask = [], [], []
        for k, (o1, o2) in enumerate(zip(fwd, bwd)):
            for o in (o1, o2):
                if o in (1, 2):
                    self.stats["answers"] += 1
                    self.stats["first_chosen"] += o == 1
            if is_failure(o1) or is_failure(o2):
                out.append(flip(o2) if is_failure(o1) and not is_failure(o2) else o1)
                cons.append(None)
                continue
            o2 = flip(o2)
            self.stats["both_answered"] += 1
            if o1 == o2:
                out.append(o1)
                cons.append(True)
            else:
                self.stats["inconsistent"] += 1
                out.append(TIE)
                cons.append(False)
                if self.disagreement == "reask":
                    reask.append(k)
        if reask:
            third = self.inner.variant(1).judge_pairs([items[k] for k in reask])
            for k, o in zip(reask, third):
                out[k] = o if o in (1, 2) else TIE
            self.stats["reasked"] += len(reask)
        self.last_consistency = cons
        return self._count(out)

    @property
    def position_bias_rate(self) -> float:
        return self.stats["inconsistent"] / self.stats["both_answered"] if self.stats["both_answered"] else float("nan")

    @property
    def first_position_rate(self) -> float:
        return self.stats["first_chosen"] / self.stats["answers"] if self.stats["answers"] else float("nan")


class MajorityJudge(Judge):
    """k-vote majority (paper App. C.1): ``votes`` independent samples of ``inner`` (vote 0 is
    ``inner`` itself, vote k ``inner.variant(k)``); ties and failures cast no vote; with
    ``n1``/``n2`` votes for the first/second candidate the outcome is a tie when
    ``|n1 - n2| <= margin`` (default 1), else the majority; all votes failed -> Failure."""

    def __init__(self, inner: Judge, votes: int = 5, margin: int = 1):
        super().__init__()
        if votes < 1:
            raise ValueError("votes must be >= 1")
        self.judges = [inner] + [inner.variant(k) for k in range(1, votes)]
        self.margin = margin
        self.name = f"{inner.name}+majority{votes}"

    def judge_pairs(self, items):
        items = list(items)
        ballots = [j.judge_pairs(items) for j in self.judges]
        out = []
        for k in range(len(items)):
            vs = [b[k] for b in ballots]
            if all(is_failure(v) for v in vs):
                out.append(Failure(f"all {len(vs)} votes failed: {vs[0].reason}"))
                continue
            n1 = sum(v == 1 for v in vs if not is_failure(v))
            n2 = sum(v == 2 for v in vs if not is_failure(v))
            out.append(TIE if abs(n1 - n2) <= self.margin else (1 if n1 > n2 else 2))
        return self._count(out)


# ============================================================================ CPU judges
class ProxyJudge(Judge):
    """CPU proxy judge (not the paper's judge): the candidate whose embedding is closer to the
    query's wins,

        outcome = 1 if cos(e_q, e_a) - cos(e_q, e_b) > eps, 2 if < -eps, tie otherwise,

    with ``eps = 1e-6``: float32 encoders give a text vectors that differ by ~1e-7 depending on the
    batch it was first embedded in, so candidates whose embedded chunks are identical must tie in
    every run, not by the noise of one. With query and candidates embedded as full documents (problem + solution) by a packaged
    encoder through ``saber_lib.embed`` (each text once, through the persistent store). The
    encoder must not be one of the evaluated retrievers (default ``use-m``)."""

    TIE_EPS = 1e-6

    def __init__(self, encoder="use-m", cache_dir=None, store=None, allow_retriever: bool = False,
                 evaluated: Sequence[str] | None = None):
        super().__init__()

        if isinstance(encoder, str):
            # the retrievers a benchmark evaluates (evaluate.retrievers) when known, else every registered one
            same = (circular_judge(encoder, evaluated) if evaluated is not None
                    else encoder if encoder in embed.retriever_encoders() else None)
            if not allow_retriever and same:
                raise ValueError(f"tournament.judge_embed_model: {encoder!r} is the model of {same!r}, an evaluated "
                                 "retriever; a proxy judge built on it would favour it (use e.g. 'use-m')")
            encoder = embed.get_encoder(encoder)
        self.encoder = encoder
        self.store = store if store is not None else (embed.EmbeddingStore(cache_dir) if cache_dir else None)
        self.name = f"proxy:{encoder.name}-cosine"

    def vectors(self, texts: list[str]) -> dict[str, np.ndarray]:
        uniq = list(dict.fromkeys(texts))
        X = embed.l2_normalize(embed.embed(self.encoder, uniq, self.store, kind="document"))
        return dict(zip(uniq, X))

    def candidate_scores(self, items) -> list[float]:
        """``cos(e_q, e_c)`` per ``(q, c)``."""
        items = list(items)
        vec = self.vectors([_text(x) for it in items for x in it])
        return [float(vec[_text(q)] @ vec[_text(c)]) for q, c in items]

    def margins(self, items) -> list[float]:
        """``cos(e_q, e_a) - cos(e_q, e_b)`` per ``(q, a, b)``: the evidence for the first candidate."""
        items = list(items)
        vec = self.vectors([_text(x) for it in items for x in it])
        return [float(vec[_text(q)] @ vec[_text(a)]) - float(vec[_text(q)] @ vec[_text(b)]) for q, a, b in items]

    def judge_pairs(self, items):
        out = [1 if d > self.TIE_EPS else 2 if d < -self.TIE_EPS else TIE for d in self.margins(items)]
        return self._count(out)


# ============================================================================ prompt fingerprint
def judge_prompt_hash(judge) -> str | None:
    """The :func:`prompt_hash` of an LLM judge's prompt template (``pairwise_judge`` or, in
    log-probability mode, ``pairwise_judge_logprob``; wrappers such as a position-swapped judge are
    looked through); None for a judge without a prompt (proxy, simulated)."""
    inner = judge
    while hasattr(inner, "inner"):
        inner = inner.inner
    if not isinstance(inner, LLMJudge):
        return None
    name = "pairwise_judge_logprob" if inner.logprob else "pairwise_judge"
    return prompt_hash(repr(prompts.template(name)))


def prompt_hash(text: str) -> str:
    """A short, stable fingerprint of a prompt template (first 16 hex digits of its sha256)."""
    return hashlib.sha256((text or "").encode("utf-8")).hexdigest()[:16]
