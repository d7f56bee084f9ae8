"""The judge interface every pairwise judge implements (:mod:`saber_lib.judging.judges` holds the
judges; :mod:`saber_lib.judging.simulated` the simulated one), and the checks of what a judge
answers (:func:`checked_labels`, :func:`checked_candidate_scores`): a judge out of its contract is
one :class:`JudgeFault` line naming it, before any answer is used or stored."""
from __future__ import annotations

from collections import Counter
from typing import Sequence

from ..retrieval.base import ScoreError, checked_scores
from .outcomes import TIE, is_failure, outcome_label


class JudgeFault(ValueError):
    """A judge (often a plugin's) that failed, or answered out of its contract: another number of
    verdicts than pairs, a verdict that is no outcome, scores that are not numbers, a factory that
    returned no :class:`Judge`. One line naming the judge."""


def checked_labels(judge, outs, n: int) -> list[str]:
    """The outcome labels (``a | b | tie | failure``) of a judge's ``n`` verdicts ``outs``, or a
    :class:`JudgeFault` naming ``judge`` when they are another number or one is no outcome."""
    who = getattr(judge, "name", type(judge).__name__)
    if isinstance(outs, (str, bytes)) or not isinstance(outs, Sequence):
        raise JudgeFault(f"judge {who!r}: returned {type(outs).__name__}, not a list of {n} verdicts")
    if len(outs) != n:
        raise JudgeFault(f"judge {who!r}: returned {len(outs)} verdicts for {n} pairs")
    try:
        return [outcome_label(o)[0] for o in outs]
    except ValueError as e:
        raise JudgeFault(f"judge {who!r}: {e}") from None


def checked_candidate_scores(judge, items) -> list[float]:
    """``judge.candidate_scores(items)`` checked: one real number per ``(query, candidate)``."""
    items = list(items)
    who = f"judge {getattr(judge, 'name', type(judge).__name__)!r}, candidate_scores"
    try:
        return [float(v) for v in checked_scores(judge.candidate_scores(items), len(items), who, "candidates")]
    except ScoreError as e:
        raise JudgeFault(str(e)) from None


def _text(x) -> str:
    return x if isinstance(x, str) else x.text


def _id(x) -> str:
    return x if isinstance(x, str) else x.id


class Judge:
    """Base class: subclasses implement :meth:`judge_pairs`; ``name`` names the backend in every
    artifact; ``stats`` counts calls and failures. A judge that scores one candidate at a time may
    also define ``candidate_scores(items)``: one float per ``(query, candidate)`` (higher = closer),
    which the graded-label statistics read for a per-query rank correlation."""

    name = "judge"

    def __init__(self):
        self.stats: Counter = Counter()

    def judge(self, query, a, b):
        return self.judge_pairs([(query, a, b)])[0]

    def judge_pairs(self, items: Sequence[tuple]) -> list:
        raise NotImplementedError

    def variant(self, k: int) -> "Judge":
        """An independent sample of this judge (vote ``k``): used by majority votes and re-asks."""
        raise NotImplementedError(f"{type(self).__name__} has no independent variants")

    def _count(self, outs):
        self.stats["judgments"] += len(outs)
        self.stats["failures"] += sum(is_failure(o) for o in outs)
        self.stats["ties"] += sum((not is_failure(o)) and o == TIE for o in outs)
        return outs
