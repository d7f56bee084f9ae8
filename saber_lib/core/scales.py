"""Relevance scales for the rescaling analysis: a scheme ``"[lo,hi] exp|linear [rank] [round]"`` names a
scale, a gain, whether the ratings are first replaced by their ranks within the query, and whether
rescaled ratings are rounded (:mod:`saber_lib.metrics.rescaling` applies
it). The grammar lives here, beside the profile's value types, so that the profile's check and the
metric read a scheme one way. May import: nothing of ``saber_lib``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

GAINS = ("exp", "linear")   # nDCG's gain: 2^rel - 1 or rel
#: the highest top a scale may have, per gain: with the exponential gain a top rating's gain 2^hi - 1
#: must stay a finite float when k of them are summed (2^1024 overflows; 2^1000 leaves 2^23 of room);
#: a linear scale's ends stay exact in a float (2^53)
MAX_TOP = {"exp": 1000, "linear": 2 ** 53}
#: the rating design's relevance mappings besides the schemes (judge validation's ceiling by design):
#: the tournament's min-max rescaled ratings as they are, and the Bradley-Terry strengths theta without
#: the min-max (each query's lowest theta at 0, the exponential gain)
DESIGN_MAPPINGS = ("min-max", "theta")
_SCHEME = re.compile(r"^\s*\[\s*(\d+)\s*,\s*(\d+)\s*\]\s+([a-z]+)(?:\s+(rank))?(?:\s+(round))?\s*$")


@dataclass(frozen=True)
class Scheme:
    """A relevance scale ``[lo, hi]`` (integers), a gain (``exp`` | ``linear``), whether the
    rescaled ratings are rounded to integers, and whether the ratings are first replaced by their
    ranks within the query (``by_rank``: only the order of a query's candidates is kept)."""

    lo: int
    hi: int
    gain: str
    rounded: bool
    by_rank: bool = False

    @property
    def label(self) -> str:
        return f"[{self.lo},{self.hi}] {self.gain}" + (" rank" if self.by_rank else "") + (" round" if self.rounded else "")


def parse_scheme(text: str) -> Scheme:
    """A scheme from its text ``"[lo,hi] exp|linear"`` with an optional ``" rank"`` then an optional
    ``" round"``; anything else raises ``ValueError`` naming the text and the grammar."""
    m = _SCHEME.match(text) if isinstance(text, str) else None
    if m is None or m.group(3) not in GAINS:
        raise ValueError(f"rescaling scheme {text!r}: expected '[lo,hi] exp' or '[lo,hi] linear', "
                         "optionally followed by ' rank' and/or ' round' in that order (lo < hi, whole numbers)")
    lo, hi = int(m.group(1)), int(m.group(2))
    if lo >= hi:
        raise ValueError(f"rescaling scheme {text!r}: the scale's low end {lo} must be below its high end {hi}")
    if hi > MAX_TOP[m.group(3)]:
        raise ValueError(f"rescaling scheme {text!r}: the scale's top {hi} is above {MAX_TOP[m.group(3)]}, the "
                         f"largest a {m.group(3)} gain is computed with (its gains would overflow a float)")
    return Scheme(lo, hi, m.group(3), m.group(5) is not None, m.group(4) is not None)


def scheme_error(text) -> str | None:
    """Why ``text`` is not a scheme (None when it is), for the profile's check."""
    try:
        parse_scheme(text)
    except ValueError as e:
        return str(e)
    return None


def duplicate_scheme(texts) -> str | None:
    """Why a list of schemes names one scheme twice, however written (None when it does not); the
    texts must be schemes (:func:`scheme_error`)."""
    first: dict[str, int] = {}
    for i, text in enumerate(texts):
        label = parse_scheme(text).label
        if label in first:
            return f"{label!r} is listed twice (entries {first[label]} and {i}): list each scheme once"
        first[label] = i
    return None
