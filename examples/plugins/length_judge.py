"""A judge plugin: prefers the candidate whose solution length is closer to the query's.

Load it with ``--set 'run.plugins=[examples.plugins.length_judge]'``; then ``--judge
closer-length`` (or ``closer-length:0.1``, the relative difference below which it calls a tie)
works wherever a judge is named (``saber judge-check``, ``tournament.judge``).
"""
from saber_lib.judging import Judge, register_judge


def _text(x) -> str:
    return x if isinstance(x, str) else x.text


class CloserLength(Judge):
    """1 when ``a`` is closer in length to the query than ``b``, 2 when ``b`` is, 0 (a tie) when the
    two distances differ by less than ``tie`` of the query's length."""

    def __init__(self, tie: float = 0.05):
        super().__init__()
        self.tie = tie
        self.name = f"closer-length:{tie:g}"

    def candidate_scores(self, items):
        """Optional: one score per (query, candidate), higher = closer (here minus the relative length
        difference); with it, `saber judge-check --grades` also reports a per-query rank correlation."""
        return [-abs(len(_text(c)) - max(len(_text(q)), 1)) / max(len(_text(q)), 1) for q, c in items]

    def judge_pairs(self, items):
        out = []
        for q, a, b in items:
            n = max(len(_text(q)), 1)
            da, db = abs(len(_text(a)) - n) / n, abs(len(_text(b)) - n) / n
            out.append(0 if abs(da - db) < self.tie else 1 if da < db else 2)
        return self._count(out)   # the base class keeps the counts of judgments and ties


@register_judge("closer-length")
def make_closer_length(argument):
    """``closer-length`` or ``closer-length:<tie>``."""
    return CloserLength() if argument is None else CloserLength(float(argument))
