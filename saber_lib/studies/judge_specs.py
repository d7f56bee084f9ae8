"""Pairwise judges named by a short spec, answering a verdict and, where the judge has one, a
margin for each (query, candidate 1, candidate 2) triple (``saber judge-check``).

Specs (:data:`SPEC_HELP`):

* ``profile`` - the profile's tournament judge exactly as configured (``tournament.judge``,
  ``position_swap``, ``swap_disagreement``, the LLM backend; ``judging.judges.judge_from_profile``).
* ``llm`` - the profile's LLM backend as a pairwise judge (``LLMJudge``; log-probability mode when
  ``llm.logprob_judge``), without position swap; every call through the backend's persistent cache.
* ``simulated`` - the simulated judge (``tournament.judge_sim_agreement``, the run's seed).
* ``first`` - always the candidate shown first (a floor: position bias alone).
* ``proxy:<encoder>`` - cosine of query and candidate embeddings of any registered encoder;
  margin ``cos(q, a) - cos(q, b)``.
* ``signal:topic`` / ``signal:summary`` - the candidate with the higher selection signal
  (``signals.pair_values``) wins, equal values tie; margin = the difference of the two signals.
* ``blend:<spec>+<spec>[:w]`` - averaged margins of two judges: each judge's margins are divided by
  their root mean square over the triples judged (a scale taken without the labels, so nothing is
  fitted to them), a judge without margins contributes +1 / -1 / 0 from its verdict, and the blend
  is ``w * m1 + (1 - w) * m2`` (``w`` = 0.5 by default); its sign is the verdict (0: tie). A failure
  of either judge is a failure of the blend.

LLM judges read texts clipped to ``llm.text_max_words`` words (the budget the stages use); the
others read whole texts.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from .. import embed
from ..judging import judges
from ..judging.judges import LLMJudge, ProxyJudge, SwappedJudge
from ..judging.simulated import SimulatedJudge
from ..judging.outcomes import is_failure, outcome_label
from ..llm.retry import margin_verdict

SPEC_HELP = ("profile | llm | simulated | first | proxy:<encoder> | signal:topic | signal:summary | "
             "blend:<spec>+<spec>[:w]")
SIGNALS = ("topic", "summary")
VERDICT_SIGN = {"a": 1.0, "b": -1.0, "tie": 0.0}


class SpecError(ValueError):
    """A judge spec that names no judge (one line, naming the spec)."""


@dataclass(frozen=True)
class Spec:
    kind: str                       # profile | llm | simulated | first | proxy | signal | blend
    arg: str | None = None          # encoder or signal name
    parts: tuple = ()               # blend: its two specs
    weight: float = 0.5             # blend: the first judge's weight
    text: str = ""                  # the spec as written


@dataclass
class Answers:
    labels: list                    # a | b | tie | failure, one per triple
    margins: list | None            # > 0 favours the first candidate; None: verdicts only
    detail: str                     # the judge (and backend) that answered


def parse_spec(text: str, nested: bool = False) -> Spec:
    """A :class:`Spec` from its text, or :class:`SpecError` naming it."""
    t = (text or "").strip()
    bad = SpecError(f"judge {text!r}: expected {SPEC_HELP}")
    if t in ("profile", "llm", "simulated", "first"):
        return Spec(t, text=t)
    kind, _, rest = t.partition(":")
    if kind == "proxy":
        if rest not in embed.REGISTRY:
            raise SpecError(f"judge {text!r}: unknown encoder {rest!r} (registered: {', '.join(embed.REGISTRY)})")
        return Spec("proxy", rest, text=t)
    if kind == "signal":
        if rest not in SIGNALS:
            raise SpecError(f"judge {text!r}: the signal is topic or summary")
        return Spec("signal", rest, text=t)
    if kind == "blend" and not nested:
        body, weight = rest, 0.5
        head, sep, tail = rest.rpartition(":")
        if sep and "+" not in tail:
            try:
                weight = float(tail)
                body = head
            except ValueError:
                pass
        if not 0.0 <= weight <= 1.0:
            raise SpecError(f"judge {text!r}: the blend weight must be in [0, 1]")
        sides = body.split("+")
        if len(sides) != 2:
            raise SpecError(f"judge {text!r}: a blend joins exactly two judges (blend:<spec>+<spec>[:w])")
        try:
            parts = (parse_spec(sides[0], True), parse_spec(sides[1], True))
        except SpecError as e:
            raise SpecError(f"judge {text!r}: in the blend, {e}") from None
        return Spec("blend", parts=parts, weight=weight, text=t)
    raise bad


def margin_labels(margins: Sequence[float]) -> list[str]:
    """Verdicts of margins: > 0 the first candidate, < 0 the second, 0 a tie, NaN a failure."""
    return ["failure" if not np.isfinite(m) else "a" if m > 0 else "b" if m < 0 else "tie" for m in margins]


def _inner_proxy(judge) -> ProxyJudge | None:
    while isinstance(judge, SwappedJudge):
        judge = judge.inner
    return judge if isinstance(judge, ProxyJudge) else None


def _judge_answers(judge, items) -> Answers:
    labels = [outcome_label(o)[0] for o in judge.judge_pairs(items)] if items else []
    proxy = _inner_proxy(judge)
    return Answers(labels, proxy.margins(items) if proxy else None, judge.name)


def _llm_answers(judge: LLMJudge, items) -> Answers:
    """An LLM judge's answers; in log-probability mode with its margins (an undefined margin is a tie
    with margin 0; a failure keeps a NaN margin)."""
    if not judge.logprob or not items:
        return _judge_answers(judge, items)
    got = judge.pair_margins(items)
    labels = ["failure" if is_failure(g) else margin_verdict(g) for g in got]
    margins = [float("nan") if is_failure(g) else 0.0 if np.isnan(g) else float(g) for g in got]
    return Answers(labels, margins, judge.name)


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


class SpecJudges:
    """Builds and asks the judges of specs for one profile and run.

    ``params``: the flattened ``tournament`` keys plus ``llm`` (dict), ``seed`` and ``cache_dir``
    (what ``judge_from_profile`` reads); ``docs`` / ``llm_docs``: id -> ``Doc`` with whole texts
    and with texts clipped for LLM judges; ``backend``: a callable that returns the profile's LLM
    backend (built on first use); ``signals``: a callable that returns a
    :class:`saber_lib.signals.pair_values.PairSignals` (built on first use)."""

    def __init__(self, params: dict, docs: dict, llm_docs: dict, backend: Callable, signals: Callable):
        self.params, self.docs, self.llm_docs = params, docs, llm_docs
        self._backend, self._signals = backend, signals

    def _items(self, triples, llm: bool):
        d = self.llm_docs if llm else self.docs
        return [(d[q], d[a], d[b]) for q, a, b in triples]

    def answer(self, spec: Spec, triples: Sequence[tuple[str, str, str]]) -> Answers:
        """The judge's answers on ``(query_id, a, b)`` triples (``a`` shown first)."""
        p = self.params
        if spec.kind == "first":
            return Answers(["a"] * len(triples), None, "always the candidate shown first")
        if spec.kind == "signal":
            sig = self._signals()
            values = sig.topic if spec.arg == "topic" else sig.summary
            m = values([(q, a) for q, a, _ in triples]) - values([(q, b) for q, _, b in triples])
            name = "topic similarity (BMA of Lin)" if spec.arg == "topic" else "summary similarity (Jaccard)"
            return Answers(margin_labels(m), [float(x) for x in m], f"signal: {name}")
        if spec.kind == "blend":
            one, two = (self.answer(s, triples) for s in spec.parts)
            return blend(one, two, spec.weight)
        if spec.kind == "proxy":
            j = ProxyJudge(spec.arg, cache_dir=p["cache_dir"], allow_retriever=True)
            return _judge_answers(j, self._items(triples, False))
        if spec.kind == "simulated":
            j = SimulatedJudge(p["judge_sim_agreement"], seed=p["seed"])
            return _judge_answers(j, self._items(triples, False))
        if spec.kind == "llm":
            j = LLMJudge(self._backend(), retries=p["judge_retries"], logprob=bool(p["llm"].get("logprob_judge")))
            return _llm_answers(j, self._items(triples, True))
        if spec.kind == "profile":
            uses_llm = p["judge"] == "llm"
            j = judges.judge_from_profile(p, self._backend() if uses_llm else None)
            return _judge_answers(j, self._items(triples, uses_llm))
        raise SpecError(f"judge {spec.text!r}: expected {SPEC_HELP}")
