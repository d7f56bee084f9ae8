"""Judgment outcomes: one value type and its conversions (paper 3.5).

A judge returns an :data:`Outcome`: ``1`` (the candidate shown first, ``a``, is closer to the query),
``2`` (the one shown second, ``b``), :data:`TIE` (0, only where a judge can abstain) or a
:class:`~saber_lib.llm.types.Failure` (falsy, with its reason). Its encodings elsewhere:

* the judgments table's ``outcome`` column: :data:`OUTCOMES` (``a`` | ``b`` | ``tie`` | ``failure``),
  via :func:`outcome_label`;
* weighted Bradley-Terry comparisons: :func:`comparisons` (a tie counts half a win each way);
* integer codes seen from ``a``: :data:`CODE_OF_LABEL` / :data:`LABEL_OF_CODE` (1 if ``a`` was
  preferred, -1 if ``b``, 0 tie, 2 failure or not judged; the inversions study's int8 matrices,
  the rating draws' verdict arrays);
* the score of ``a`` (1 win, 0 loss, 1/2 tie): :func:`first_score` (the order-effect fit);
* any of these, or a judge's answer, back to a label: :func:`as_label`.

May import: ``llm.types``.
"""
from __future__ import annotations

from ..llm.types import Failure

OUTCOMES = ("a", "b", "tie", "failure")
#: int8 code of an outcome label, seen from ``a`` (the inversions study's matrices)
CODE_OF_LABEL = {"a": 1, "b": -1, "tie": 0, "failure": 2}
LABEL_OF_CODE = {1: "a", -1: "b", 0: "tie", 2: "failure"}

A_PREFERRED = 1   # the candidate shown first
B_PREFERRED = 2   # the candidate shown second
TIE = 0
Outcome = int | Failure   # A_PREFERRED | B_PREFERRED | TIE | Failure(reason)


def codes_of_labels(labels):
    """The :data:`CODE_OF_LABEL` codes of outcome labels (a list of ints)."""
    try:
        return [CODE_OF_LABEL[o] for o in labels]
    except KeyError as e:
        raise ValueError(f"unknown outcome {e.args[0]!r} (expected one of {OUTCOMES})") from None


def first_score(code):
    """Score of the candidate shown first from :data:`CODE_OF_LABEL` codes (1, -1, 0):
    1 for a win, 0 for a loss, 1/2 for a tie (works on numpy arrays)."""
    return (code + 1) / 2


def as_label(o) -> str:
    """A judgments-table label from a label or a judge's answer (1, 2, 0, a Failure or None)."""
    if o in OUTCOMES:
        return o
    if o is None or isinstance(o, Failure):
        return "failure"
    return outcome_label(o)[0]


def is_failure(o) -> bool:
    return isinstance(o, Failure)


def outcome_label(o) -> tuple[str, str | None]:
    """Judge outcome -> (judgments-table ``outcome``, ``reason``): 1 -> ``a``, 2 -> ``b``."""
    if isinstance(o, Failure):
        return "failure", o.reason
    if o == A_PREFERRED:
        return "a", None
    if o == B_PREFERRED:
        return "b", None
    if o == TIE:
        return "tie", None
    raise ValueError(f"not a judge outcome: {o!r}")


def flip(o):
    """Outcome of the swapped presentation mapped back to the original order."""
    return 3 - o if o in (1, 2) else o


def comparisons(x, y, outcome: str) -> list[tuple]:
    """The weighted (winner, loser, weight) comparisons of one judgment of the pair (x, y):
    ``a`` -> (x, y, 1); ``b`` -> (y, x, 1); ``tie`` -> (x, y, .5) and (y, x, .5) (half a win each
    way); ``failure`` -> none."""
    if outcome == "a":
        return [(x, y, 1.0)]
    if outcome == "b":
        return [(y, x, 1.0)]
    if outcome == "tie":
        return [(x, y, 0.5), (y, x, 0.5)]
    if outcome != "failure":
        raise ValueError(f"unknown outcome {outcome!r} (expected one of {OUTCOMES})")
    return []


def comparisons_from_outcomes(a, b, outcome):
    """Weighted (winners, losers, weights) from judgments of pairs (a[k], b[k]).

    ``a`` preferred -> (a, b, 1); ``b`` -> (b, a, 1); ``tie`` -> (a, b, .5) and (b, a, .5);
    ``failure`` -> nothing.
    """
    winners, losers, weights = [], [], []
    for x, y, o in zip(a, b, outcome):
        for w, lo, wt in comparisons(x, y, o):
            winners.append(w); losers.append(lo); weights.append(wt)
    return winners, losers, weights
