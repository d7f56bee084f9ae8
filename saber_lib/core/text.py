"""Texts and tokens shared by several stages (paper 3.3, 4.1).

* :func:`document_text` - the full text of a problem (``"Problem: {p}\\n\\nSolution: {s}"``), the text
  topic scorers, judges and retrievers see; :func:`setting_texts` - the query / candidate texts of an
  evaluation setting.
* :func:`clip_words` - the first words of a text (a per-text budget for prompts on slow CPUs).
* :func:`summary_tokens` - the token set ``T(s)`` of a summary (lower case, ``[a-zA-Z0-9^_]+``, stop
  words removed), with :data:`TOKEN_RE` and :func:`stop_words`.

Bottom layer: imports nothing from ``saber_lib``.
"""
from __future__ import annotations

import functools
import re


SETTINGS = ("statement-full", "full-full", "statement-statement")


# ----------------------------------------------------------------------------- document texts
def document_text(problem: str, solution: str | None) -> str:
    """The full text of a problem: ``"Problem: {p}\\n\\nSolution: {s}"`` (just ``"Problem: {p}"``
    when the source has no solution)."""
    problem = problem or ""
    if solution is None or not str(solution).strip():
        return f"Problem: {problem}"
    return f"Problem: {problem}\n\nSolution: {solution}"


CLIP_MARK = " [...]"


def clip_words(text: str | None, max_words: int) -> str:
    """The first ``max_words`` whitespace-separated words of ``text`` followed by ``CLIP_MARK``
    when words were cut; the text unchanged when ``max_words`` is 0 or it is short enough."""
    text = text or ""
    if max_words <= 0:
        return text
    words = text.split()
    if len(words) <= max_words:
        return text
    return " ".join(words[:max_words]) + CLIP_MARK


def setting_texts(setting: str, problem: str, solution: str | None) -> tuple[str, str]:
    """(text when the problem is the query, text when it is a candidate) for an evaluation setting.

    statement-full: problem / full text; full-full: full / full; statement-statement: problem / problem.
    """
    full = document_text(problem, solution)
    if setting == "statement-full":
        return problem or "", full
    if setting == "full-full":
        return full, full
    if setting == "statement-statement":
        return problem or "", problem or ""
    raise ValueError(f"unknown setting {setting!r}; known: {', '.join(SETTINGS)}")


# ----------------------------------------------------------------------------- summary tokens
#: The 30 mathematics stop words of the summary tokens (paper App. B.2, the authors' supplementary list), added to scikit-learn's English list.
MATH_STOP_WORDS = frozenset("""
let assume consider given suppose find compute solve show determine value expression equation
result step term method approach solution thus hence therefore so then if and or but theorem lemma
""".split())

TOKEN_RE = re.compile(r"[a-zA-Z0-9^_]+")


@functools.cache
def stop_words() -> frozenset:
    """The summary tokens' stop words: scikit-learn's English list and :data:`MATH_STOP_WORDS` (built on
    first use, so that importing this module does not import scikit-learn)."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS  # heavy (scikit-learn, SciPy): first use only
    return frozenset(ENGLISH_STOP_WORDS) | MATH_STOP_WORDS


def summary_tokens(text) -> frozenset:
    """``T(s)``: lower-case ``s``, take the ``[a-zA-Z0-9^_]+`` tokens, drop stop words; a frozenset.

    ``None`` or an empty string give the empty set.
    """
    if not text:
        return frozenset()
    stop = stop_words()
    return frozenset(t for t in TOKEN_RE.findall(str(text).lower()) if t not in stop)
