"""Summary similarity (paper 3.3): Jaccard of the summaries' token sets.

The tokenizer (:func:`saber_lib.core.text.summary_tokens`) lives in :mod:`saber_lib.core.text`.
"""
from __future__ import annotations


def jaccard(a, b, empty: float = 0.0) -> float:
    """``J(A, B) = |A & B| / |A | B|``; ``empty`` when both sets are empty (the authors' code: 1.0)."""
    a, b = set(a), set(b)
    union = len(a | b)
    if union == 0:
        return float(empty)
    return len(a & b) / union
