"""The built-in judge kinds of the registry (:mod:`.registry`), the judges only a spec names, and the
answers of any judge with its margins where it has them.

Specs (``<kind>[:<argument>]``):

* ``profile`` - the profile's tournament judge exactly as configured (``tournament.judge``,
  ``position_swap``, ``swap_disagreement``, the LLM backend): :func:`judge_from_profile`.
* ``llm`` - the profile's LLM backend as a pairwise judge (``LLMJudge``; log-probability mode when
  ``llm.logprob_judge``), without position swap; ``llm:logprob`` - log-probability mode whatever
  the profile says (summed over both orders).
* ``ordinal`` - a 0-100 score per candidate from the LLM backend (``OrdinalJudge``).
* ``proxy`` - cosine of query and candidate embeddings with ``tournament.judge_embed_model``;
  ``proxy:<encoder>`` - with any registered encoder, or ``nomic-embed`` (llama.cpp,
  ``embed.gguf``); margin ``cos(q, a) - cos(q, b)``. The encoder of a judge that rates the
  benchmark must not be an evaluated retriever's (``retrieval.registry.circular_judge``).
* ``simulated`` - the simulated judge (``tournament.judge_sim_agreement``, the run's seed);
  ``simulated:<acc>`` - with agreement ``acc`` in [0.5, 1].
* ``majority:<k>`` - ``k`` independent votes of the profile's judge without position swap, tie
  when the vote margin is at most 1; ``majority:<k>:<spec>`` - votes of another judge;
  ``majority`` - ``judge_validation.jv_majority_votes`` votes.
* ``first`` - always the candidate shown first (a floor: position bias alone).
* ``signal:topic`` / ``signal:summary`` - the candidate with the higher selection signal
  (``signals.pair_values``) wins, equal values tie; margin = the difference of the two signals.
* ``retriever:<name>`` - the candidate a registered retriever scores higher for the query's whole
  text wins (:mod:`.retriever_judge`).
* ``blend:<spec>+<spec>[:w]`` - averaged margins of two judges: each judge's margins are divided by
  their root mean square over the triples judged (a scale taken without the labels, so nothing is
  fitted to them), a judge without margins contributes +1 / -1 / 0 from its verdict, and the blend
  is ``w * m1 + (1 - w) * m2`` (``w`` = 0.5 by default); its sign is the verdict (0: tie). A failure
  of either judge is a failure of the blend.

LLM judges read texts clipped to ``llm.text_max_words`` words where the caller gives whole texts
(``JudgeContext.clip_words``); the others read whole texts.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from .. import embed
from ..core.config import paper_profile
from ..retrieval.registry import circular_judge
from ..core.text import clip_words
from ..embed.gguf import NomicEncoder
from ..llm.retry import margin_verdict
from ..llm.types import Failure
from .judge_base import Judge, JudgeFault, _id, checked_labels
from .judges import LLMJudge, MajorityJudge, OrdinalJudge, ProxyJudge, SwappedJudge
from .outcomes import OUTCOMES, TIE, is_failure
from .registry import (JudgeContext, JudgeSettings, JudgeSpecError, build_judge, parse_judge_spec, refers_to_profile,
                       register_judge, usage, uses_llm)
from .simulated import SimulatedJudge

VERDICT_SIGN = {"a": 1.0, "b": -1.0, "tie": 0.0}
OUTCOME = {"a": 1, "b": 2, "tie": TIE}
NOMIC = "nomic-embed"        # the llama.cpp encoder (embed.gguf), a proxy judge's second family


@dataclass
class Answers:
    labels: list                    # a | b | tie | failure, one per triple
    margins: list | None            # > 0 favours the first candidate; None: verdicts only
    detail: str                     # the judge (and backend) that answered


def margin_labels(margins: Sequence[float]) -> list[str]:
    """Verdicts of margins: > 0 the first candidate, < 0 the second, 0 a tie, NaN a failure."""
    return ["failure" if not np.isfinite(m) else "a" if m > 0 else "b" if m < 0 else "tie" for m in margins]


def _outcomes(labels) -> list:
    return [OUTCOME.get(x, Failure("no verdict")) for x in labels]


def _inner_proxy(judge) -> ProxyJudge | None:
    while isinstance(judge, SwappedJudge):
        judge = judge.inner
    return judge if isinstance(judge, ProxyJudge) else None


def judge_answers(judge: Judge, items) -> Answers:
    """A judge's answers on ``(query, a, b)`` items: its verdicts and, where it has them, its margins
    (a proxy judge's cosine differences, seen through a position swap; an LLM judge's in
    log-probability mode: an undefined margin is a tie with margin 0, a failure keeps a NaN)."""
    if hasattr(judge, "answers"):
        return _checked_answers(judge, judge.answers(items), len(items))
    if isinstance(judge, LLMJudge) and judge.logprob and items:
        got = judge.pair_margins(items)
        labels = ["failure" if is_failure(g) else margin_verdict(g) for g in got]
        margins = [float("nan") if is_failure(g) else 0.0 if np.isnan(g) else float(g) for g in got]
        return Answers(labels, margins, judge.name)
    labels = checked_labels(judge, judge.judge_pairs(items), len(items)) if items else []
    proxy = _inner_proxy(judge)
    return Answers(labels, proxy.margins(items) if proxy else None, judge.name)


def _checked_answers(judge, ans: Answers, n: int) -> Answers:
    """A judge's own :class:`Answers`, once they hold ``n`` labels of :data:`OUTCOMES` (and ``n`` margins)."""
    counts = {len(ans.labels), n if ans.margins is None else len(ans.margins)}
    if counts != {n}:
        raise JudgeFault(f"judge {judge.name!r}: returned {max(counts - {n})} verdicts for {n} pairs")
    bad = [x for x in ans.labels if not isinstance(x, str) or x not in OUTCOMES]
    if bad:
        raise JudgeFault(f"judge {judge.name!r}: verdict {bad[0]!r} is not one of {', '.join(OUTCOMES)}")
    return ans


def _normalised(ans: Answers) -> np.ndarray:
    """The answers' margins (verdicts as +1 / -1 / 0 without them; NaN for a failure) over their RMS."""
    if ans.margins is not None:
        m = np.asarray(ans.margins, dtype=np.float64)
    else:
        m = np.array([VERDICT_SIGN.get(x, np.nan) for x in ans.labels])
    m = np.where([x in VERDICT_SIGN for x in ans.labels], m, np.nan)
    ok = np.isfinite(m)
    rms = float(np.sqrt(np.mean(m[ok] ** 2))) if ok.any() else 0.0
    return m / rms if rms > 0 else m


def blend(first: Answers, second: Answers, weight: float) -> Answers:
    """Averaged normalised margins of two judges' answers (module docstring)."""
    m = weight * _normalised(first) + (1.0 - weight) * _normalised(second)
    return Answers(margin_labels(m), [float(x) for x in m],
                   f"blend({weight:g} x {first.detail} + {1 - weight:g} x {second.detail}; RMS-scaled margins)")


# ============================================================================ judges only a spec names
class _AnswersJudge(Judge):
    """A judge defined by its :meth:`answers`; the verdicts follow from them."""

    def judge_pairs(self, items):
        items = list(items)
        return self._count(_outcomes(self.answers(items).labels))


class FirstJudge(_AnswersJudge):
    """Always the candidate shown first."""

    name = "always the candidate shown first"

    def answers(self, items):
        return Answers(["a"] * len(items), None, self.name)


class SignalJudge(_AnswersJudge):
    """The candidate with the higher selection signal wins (``topic``: BMA of Lin; ``summary``:
    Jaccard); ``signals``: a callable returning the run's ``PairSignals``."""

    NAMES = {"topic": "topic similarity (BMA of Lin)", "summary": "summary similarity (Jaccard)"}

    def __init__(self, which: str, signals):
        super().__init__()
        self.which, self._signals = which, signals
        self.name = f"signal: {self.NAMES[which]}"

    def candidate_scores(self, items) -> list[float]:
        """The selection signal of each ``(query, candidate)``."""
        sig = self._signals()
        values = sig.topic if self.which == "topic" else sig.summary
        return [float(v) for v in values([(_id(q), _id(c)) for q, c in items])]

    def answers(self, items):
        items = list(items)
        m = (np.asarray(self.candidate_scores([(q, a) for q, a, _ in items]), dtype=np.float64)
             - np.asarray(self.candidate_scores([(q, b) for q, _, b in items]), dtype=np.float64))
        return Answers(margin_labels(m), [float(x) for x in m], self.name)


class BlendJudge(_AnswersJudge):
    """Averaged RMS-scaled margins of two judges (:func:`blend`), over the items judged together."""

    def __init__(self, first: Judge, second: Judge, weight: float = 0.5):
        super().__init__()
        self.first, self.second, self.weight = first, second, weight
        self.name = f"blend({weight:g} x {first.name} + {1 - weight:g} x {second.name})"

    def answers(self, items):
        return blend(judge_answers(self.first, items), judge_answers(self.second, items), self.weight)


class ClippedJudge(Judge):
    """``inner`` shown texts clipped to ``max_words`` words (problem and solution each), as the
    stages show an LLM judge."""

    def __init__(self, inner: Judge, max_words: int):
        super().__init__()
        self.inner, self.max_words, self.name = inner, max_words, inner.name

    def _clip(self, x):
        if isinstance(x, str):
            return clip_words(x, self.max_words)
        return replace(x, problem=clip_words(x.problem, self.max_words),
                       solution=clip_words(x.solution, self.max_words))

    def _items(self, items):
        return [tuple(self._clip(x) for x in it) for it in items]

    def variant(self, k):
        return ClippedJudge(self.inner.variant(k), self.max_words)

    def judge_pairs(self, items):
        return self._count(self.inner.judge_pairs(self._items(items)))

    def answers(self, items):
        return judge_answers(self.inner, self._items(items))


class ProfileJudge(Judge):
    """The profile's judge as a spec names it (``profile``): its verdicts, and margins only where a
    proxy judge answers."""

    def __init__(self, inner: Judge):
        super().__init__()
        self.inner, self.name = inner, inner.name

    def judge_pairs(self, items):
        return self._count(self.inner.judge_pairs(items))

    def answers(self, items):
        labels = checked_labels(self.inner, self.inner.judge_pairs(items), len(items)) if items else []
        proxy = _inner_proxy(self.inner)
        return Answers(labels, proxy.margins(items) if proxy else None, self.name)


def judge_from_profile(settings: JudgeSettings, llm_backend=None, position_swap: bool | None = None, *,
                       store=None) -> Judge:
    """The judge the profile describes (``tournament.judge``; position swap when ``position_swap``,
    which overrides the profile's), the judge that rates the benchmark."""
    return _rating_judge(JudgeContext(settings, llm_backend, store=store), position_swap)


def _rating_judge(ctx: JudgeContext, position_swap: bool | None) -> Judge:
    st = ctx.settings
    spec = parse_judge_spec(st.judge)
    if refers_to_profile(spec):
        raise JudgeSpecError(f"tournament.judge: {st.judge!r} refers to the profile's own judge")
    j = build_judge(spec, replace(ctx, rates_benchmark=True))
    swap = st.position_swap if position_swap is None else position_swap
    return SwappedJudge(j, st.swap_disagreement) if swap else j


# ============================================================================ the built-in kinds
def _no_arg(arg):
    return None if arg is None else "takes no argument"


@register_judge("profile", context=True, check=_no_arg, profile_relative=True)
def _profile(arg, ctx):
    return ProfileJudge(_rating_judge(ctx, None))


def _llm_check(arg):
    return None if arg in (None, "logprob") else "the LLM judge's one option is 'logprob' (llm or llm:logprob)"


def _clipped(judge, ctx):
    return ClippedJudge(judge, ctx.clip_words) if ctx.clip_words > 0 else judge


@register_judge("llm", context=True, check=_llm_check, usage="llm[:logprob]", llm=True)
def _llm(arg, ctx):
    st = ctx.settings
    return _clipped(LLMJudge(ctx.llm("llm"), retries=st.judge_retries, logprob=arg == "logprob" or st.logprob_judge),
                    ctx)


@register_judge("ordinal", context=True, check=_no_arg, llm=True)
def _ordinal(arg, ctx):
    st = ctx.settings
    return _clipped(OrdinalJudge(ctx.llm("ordinal"), retries=st.judge_retries, score_only=st.logprob_judge), ctx)


def _encoders() -> list[str]:
    return [*embed.REGISTRY, NOMIC]


def _proxy_check(arg):
    if arg is not None and arg not in _encoders():
        return f"unknown encoder {arg!r} (registered: {', '.join(_encoders())})"
    return None


def _proxy_rating_check(arg, values):
    encoder = arg or values["tournament"]["judge_embed_model"]
    where = "" if arg else " (tournament.judge_embed_model)"
    same = circular_judge(encoder, values["evaluate"]["retrievers"])
    return (f"the proxy judge's encoder{where} {encoder!r} is the model of {same!r}, an evaluated retriever "
            f"(evaluate.retrievers): a judge built on it would favour it; choose an encoder not evaluated"
            if same else None)


@register_judge("proxy", context=True, check=_proxy_check, usage="proxy[:<encoder>]",
                rating_check=_proxy_rating_check)
def _proxy(arg, ctx):
    st = ctx.settings
    name = arg or st.judge_embed_model
    encoder = NomicEncoder(cache_dir=st.cache_dir) if name == NOMIC else name
    return ProxyJudge(encoder, cache_dir=st.cache_dir, store=ctx.store, allow_retriever=not ctx.rates_benchmark,
                      evaluated=list(st.evaluated) if ctx.rates_benchmark else None)


def _agreement(arg):
    try:
        acc = float(arg)
    except ValueError:
        return None
    return acc if 0.5 <= acc <= 1.0 else None


def _simulated_check(arg):
    return None if arg is None or _agreement(arg) is not None else "the agreement is a number in [0.5, 1]"


@register_judge("simulated", context=True, check=_simulated_check, usage="simulated[:<agreement>]")
def _simulated(arg, ctx):
    st = ctx.settings
    return SimulatedJudge(st.judge_sim_agreement if arg is None else _agreement(arg), seed=st.seed)


def _majority_parts(arg):
    k, _, inner = (arg or "").partition(":")
    return (int(k) if k.isdigit() else None), (inner or None)


def _majority_check(arg):
    if arg is None:
        return None
    k, inner = _majority_parts(arg)
    if not k:
        return "the number of votes is a whole number >= 1 (majority:<k>[:<spec>])"
    if inner is not None:
        try:
            spec = parse_judge_spec(inner)
        except JudgeSpecError as e:
            return f"in the majority, {e}"
        if spec.kind == "majority":
            return "a majority of a majority is not a judge"
    return None


@register_judge("majority", context=True, check=_majority_check, usage="majority[:<k>[:<spec>]]",
                parts=lambda arg: [p for p in [_majority_parts(arg)[1]] if p],
                profile_relative=lambda arg: _majority_parts(arg)[1] is None,
                llm=lambda arg: _majority_parts(arg)[1] is not None and uses_llm(_majority_parts(arg)[1]))
def _majority(arg, ctx):
    k, inner = _majority_parts(arg)
    base = build_judge(inner, ctx) if inner else _rating_judge(ctx, False)
    votes = k or ctx.settings.majority_votes or paper_profile().values["judge_validation"]["jv_majority_votes"]
    return MajorityJudge(base, votes=votes)


@register_judge("first", check=_no_arg)
def _first(arg):
    return FirstJudge()


def _signal_check(arg):
    return None if arg in SignalJudge.NAMES else "the signal is topic or summary"


@register_judge("signal", context=True, check=_signal_check, usage="signal:topic|summary")
def _signal(arg, ctx):
    if ctx.signals is None:
        raise ValueError(f"judge 'signal:{arg}' needs the run's selection signals (topics, summaries, ontology), "
                         f"which saber judge-check provides")
    return SignalJudge(arg, ctx.signals)


def _blend_parts(arg):
    body, weight = arg or "", 0.5
    head, sep, tail = body.rpartition(":")
    if sep and "+" not in tail:
        try:
            weight, body = float(tail), head
        except ValueError:
            pass
    return body.split("+"), weight


def _blend_check(arg):
    sides, weight = _blend_parts(arg)
    if not 0.0 <= weight <= 1.0:
        return "the blend weight must be in [0, 1]"
    if len(sides) != 2:
        return "a blend joins exactly two judges (blend:<spec>+<spec>[:w])"
    for side in sides:
        try:
            spec = parse_judge_spec(side)
        except JudgeSpecError as e:
            return f"in the blend, {e}"
        if spec.kind == "blend":
            return f"in the blend, judge {side!r}: a blend inside a blend (expected {usage()})"
    return None


@register_judge("blend", context=True, check=_blend_check, usage="blend:<spec>+<spec>[:w]",
                llm=lambda arg: any(uses_llm(s) for s in _blend_parts(arg)[0]), parts=lambda arg: _blend_parts(arg)[0])
def _blend(arg, ctx):
    (one, two), weight = _blend_parts(arg)
    return BlendJudge(build_judge(one, ctx), build_judge(two, ctx), weight)


