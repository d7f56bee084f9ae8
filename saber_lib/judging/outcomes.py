"""Judgment outcomes: one value type and its conversions (paper 3.5).

A judge returns an :data:`Outcome`: ``1`` (the candidate shown first, ``a``, is closer to the query),
``2`` (the one shown second, ``b``), :data:`TIE` (0, only where a judge can abstain) or a
:class:`~saber_lib.llm.types.Failure` (falsy, with its reason). Its encodings elsewhere:

* the judgments table's ``outcome`` column: :data:`OUTCOMES` (``a`` | ``b`` | ``tie`` | ``failure``),
  via :func:`outcome_label`;
* weighted Bradley-Terry comparisons: :func:`weighted_comparisons` (a tie counts half a win each way);
* integer codes seen from ``a``: :data:`CODE_OF_LABEL` / :data:`LABEL_OF_CODE` (1 if ``a`` was
  preferred, -1 if ``b``, 0 tie, 2 failure or not judged; the inversions study's int8 matrices,
  the rating draws' verdict arrays);
* the score of ``a`` (1 win, 0 loss, 1/2 tie): :func:`first_score` (the order-effect fit);
* any of these, or a judge's answer, back to a label: :func:`as_label`.

May import: ``llm.types``.
"""
from __future__ import annotations

import numpy as np

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
    if isinstance(o, (bool, np.bool_)) or not isinstance(o, (int, np.integer)):
        raise ValueError(f"not a judge outcome: {o!r} (1: the first candidate, 2: the second, 0: a tie, or a Failure)")
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


def weighted_comparisons(a, b, codes, grouped: bool = False):
    """The weighted Bradley-Terry comparisons of judgments of the pairs ``(a[k], b[k])`` with verdict
    codes ``codes[k]`` (:data:`CODE_OF_LABEL`, seen from ``a``): arrays ``(win, lose, weight, row)``,
    ``row`` the judgment each comparison comes from.

    ``1`` (a preferred) -> ``(a, b, 1)``; ``-1`` (b) -> ``(b, a, 1)``; ``0`` (tie) -> ``(a, b, .5)``
    and ``(b, a, .5)`` (half a win each way); ``2`` (failure) -> none. Judgment by judgment, a tie's
    ``a``-over-``b`` half first; ``grouped=True``: the decided judgments' comparisons first, then the
    ties' ``a``-over-``b`` halves, then their ``b``-over-``a`` halves (the order the rating draws
    sum them in).
    """
    a = np.asarray(a, dtype=np.int64).ravel()
    b = np.asarray(b, dtype=np.int64).ravel()
    codes = np.asarray(codes, dtype=np.int64).ravel()
    if not a.size == b.size == codes.size:
        raise ValueError(f"pairs ({a.size}, {b.size}) and verdict codes ({codes.size}) differ in length")
    unknown = ~np.isin(codes, list(LABEL_OF_CODE))
    if unknown.any():
        raise ValueError(f"unknown verdict code {int(codes[unknown][0])} (expected one of {sorted(LABEL_OF_CODE)})")
    tie = codes == 0
    row = np.repeat(np.arange(codes.size), np.where(tie, 2, (codes == 1) | (codes == -1)))
    second = np.zeros(row.size, dtype=bool)
    second[1:] = row[1:] == row[:-1]          # the b-over-a half of a tie
    flip = (codes[row] == -1) | second
    win, lose = np.where(flip, b[row], a[row]), np.where(flip, a[row], b[row])
    weight = np.where(tie[row], 0.5, 1.0)
    if grouped:
        order = np.argsort(np.where(tie[row], 1 + second, 0), kind="stable")
        win, lose, weight, row = win[order], lose[order], weight[order], row[order]
    return win, lose, weight, row
