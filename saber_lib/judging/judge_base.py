"""The judge interface every pairwise judge implements (:mod:`saber_lib.judging.judges` holds the
judges; :mod:`saber_lib.judging.simulated` the simulated one)."""
from __future__ import annotations

from collections import Counter
from typing import Sequence

from .outcomes import TIE, is_failure


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
