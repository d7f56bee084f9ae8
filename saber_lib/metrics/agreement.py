"""Agreement between raters on the same units: Cohen's kappa of two raters, Krippendorff's alpha of
several (nominal labels; None/NaN entries are missing)."""
from __future__ import annotations

import math
from typing import Sequence

import krippendorff
import numpy as np


def cohen_kappa(x: Sequence, y: Sequence) -> float:
    """Cohen's kappa of two raters' nominal labels on the same units (None/NaN entries drop the
    unit): ``(p_o - p_e) / (1 - p_e)`` with ``p_e = sum_c p_x(c) p_y(c)``; 1.0 when both raters
    use one and the same category throughout (``p_e = 1``), NaN without units."""
    pairs = [(a, b) for a, b in zip(x, y) if not _missing(a) and not _missing(b)]
    if len(x) != len(y):
        raise ValueError("the two label lists differ in length")
    if not pairs:
        return math.nan
    cats = sorted({c for p in pairs for c in p}, key=str)
    n = len(pairs)
    po = sum(a == b for a, b in pairs) / n
    pe = sum((sum(a == c for a, _ in pairs) / n) * (sum(b == c for _, b in pairs) / n) for c in cats)
    if pe >= 1.0:
        return 1.0 if po == 1.0 else math.nan
    return (po - pe) / (1 - pe)


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def krippendorff_alpha(labels, level: str = "nominal") -> float:
    """Krippendorff's alpha (``krippendorff.alpha``) of a raters x units table of labels (any
    hashable values; None/NaN = missing). Labels are coded as integers in sorted order, so
    ``level`` other than ``nominal`` assumes the labels' sort order is meaningful."""
    rows = [list(r) for r in labels]
    cats = sorted({v for r in rows for v in r if not _missing(v)}, key=str)
    if len(cats) < 2:
        return 1.0 if cats else math.nan
    code = {c: i for i, c in enumerate(cats)}
    M = np.array([[np.nan if _missing(v) else code[v] for v in r] for r in rows], dtype=float)
    return float(krippendorff.alpha(reliability_data=M, level_of_measurement=level))
