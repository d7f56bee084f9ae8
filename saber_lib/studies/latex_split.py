"""LaTeX math delimiters: a small deterministic lexer that finds the math segments of a text.

Recognized math openers (outside math) and their closers::

    $ ... $        \\( ... \\)        $$ ... $$        \\[ ... \\]
    \\begin{E} ... \\end{E}   for E in equation, align, gather, multline, eqnarray, displaymath,
                              math (starred forms too)

Rules:
- A backslash escapes the next character: ``\\$`` is a literal dollar (never a delimiter) and
  ``\\\\$`` is a line break followed by a real delimiter.
- Inside math, a text command (``\\text{...}``, ``\\mbox{...}``, ...) opens a brace group in which
  ``$...$`` is *nested* math; such dollars do not close the outer segment.
- An opener without its closer is kept as literal text (so ``It costs $5.`` has no math).

``normalize_delimiters`` rewrites every math segment as ``$...$``; splitting a normalized text
gives the same segments as splitting the original (the normalizer is idempotent).
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

MATH_ENVS = ("equation", "align", "gather", "multline", "eqnarray", "displaymath", "math", "flalign")
_ENV_RE = re.compile(r"\\begin\{(" + "|".join(MATH_ENVS) + r")(\*?)\}")
_TEXT_CMD_RE = re.compile(r"\\(?:text|textrm|textit|textbf|textsf|texttt|textnormal|mbox|hbox|intertext)\s*\{")


@dataclass(frozen=True)
class Segment:
    kind: str      # "text" | "math"
    content: str   # for math: what is between the delimiters


def _skip_text_group(s: str, i: int) -> int:
    """``s[i]`` is just after the ``{`` of a text command inside math; return the index after the
    matching ``}`` (or len(s) when unbalanced). ``$...$`` inside the group is nested math."""
    depth, n = 1, len(s)
    while i < n:
        c = s[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        elif c == "$":
            end = _scan_math(s, i + 1, "$")
            if end < 0:
                return n
            i = end + 1
            continue
        i += 1
    return n


def _scan_math(s: str, i: int, closer: str) -> int:
    """Index where ``closer`` starts, scanning math content from ``i``; -1 when it never closes."""
    n = len(s)
    while i < n:
        if s.startswith(closer, i):
            return i
        c = s[i]
        if c == "\\":
            m = _TEXT_CMD_RE.match(s, i)
            if m:
                i = _skip_text_group(s, m.end())
                continue
            i += 2
            continue
        i += 1
    return -1


def split_math(text: str) -> list[Segment]:
    """Split ``text`` into alternating text and math segments (adjacent text is merged)."""
    out: list[Segment] = []
    buf: list[str] = []

    def flush():
        if buf:
            out.append(Segment("text", "".join(buf)))
            buf.clear()

    s, i, n = text, 0, len(text)
    while i < n:
        c = s[i]
        opener = closer = None
        if c == "\\" and i + 1 < n:
            nxt = s[i + 1]
            if nxt == "(":
                opener, closer = "\\(", "\\)"
            elif nxt == "[":
                opener, closer = "\\[", "\\]"
            else:
                m = _ENV_RE.match(s, i)
                if m:
                    opener, closer = m.group(0), f"\\end{{{m.group(1)}{m.group(2)}}}"
                else:
                    buf.append(s[i:i + 2])
                    i += 2
                    continue
        elif c == "$":
            opener = closer = "$$" if s.startswith("$$", i) else "$"
        if opener is None:
            buf.append(c)
            i += 1
            continue
        start = i + len(opener)
        end = _scan_math(s, start, closer)
        if end < 0:              # never closed: the opener is plain text
            buf.append(opener)
            i = start
            continue
        flush()
        out.append(Segment("math", s[start:end]))
        i = end + len(closer)
    flush()
    return out


def normalize_delimiters(text: str) -> str:
    """Rewrite every math segment with ``$...$`` delimiters (content unchanged, trimmed)."""
    parts = []
    for seg in split_math(text):
        if seg.kind == "text":
            parts.append(seg.content)
        else:
            body = seg.content.strip()
            parts.append(f"${body}$" if body else "")
    return "".join(parts)


_WS = re.compile(r"\s+")
_WORDCHAR = re.compile(r"[^\W_]")


def math_only(text: str) -> str:
    """The math segments of ``text``, each as ``$...$``, joined by single spaces."""
    return " ".join(f"${b}$" for seg in split_math(text) if seg.kind == "math" and (b := seg.content.strip()))


def words_only(text: str) -> str:
    """``text`` with every math segment removed (replaced by a space), whitespace collapsed."""
    parts = [seg.content if seg.kind == "text" else " " for seg in split_math(text)]
    return _WS.sub(" ", "".join(parts)).strip()


def is_empty_part(part: str) -> bool:
    """A math-only or words-only part is empty when it holds no letter or digit."""
    return _WORDCHAR.search(part) is None


_FIGURE = r"\[asy\](?:(?!\[/asy\]).)*\[/asy\]"  # one figure: its body holds no [/asy]
_FIGURE_RE = re.compile(_FIGURE, re.S | re.I)
_HEAD_RE = re.compile(rf"(?:\s*{_FIGURE})+\s*", re.S | re.I)
_TAIL_RE = re.compile(rf"\s*(?:{_FIGURE}\s*)+$", re.S | re.I)


def figure_mark(k: int) -> str:
    """The placeholder of a text's ``k``-th inner Asymptote figure (0-based) in :func:`mask_figures`."""
    return f"[figure {k + 1}]"


def mask_figures(text: str) -> tuple[str, list[str], str, str]:
    """Split ``[asy]...[/asy]`` figures off ``text`` (figure code is no prose to format, and a small
    model copying hundreds of its tokens drops or alters some). Returns ``(masked, figures, head,
    tail)``: ``head`` / ``tail`` are the figures (and whitespace) before the first and after the last
    words, set aside whole; ``masked`` is the text between them with each inner figure replaced by
    :func:`figure_mark`, ``figures`` the inner figures in order.
    ``unmask_figures(*mask_figures(t)) == t``."""
    head = _HEAD_RE.match(text)
    start = head.end() if head else 0
    tail = _TAIL_RE.search(text, start)
    end = tail.start() if tail else len(text)
    figures: list[str] = []

    def mark(m: re.Match) -> str:
        figures.append(m.group(0))
        return figure_mark(len(figures) - 1)

    return _FIGURE_RE.sub(mark, text[start:end]), figures, text[:start], text[end:]


def unmask_figures(text: str, figures: Sequence[str], head: str = "", tail: str = "") -> str:
    """``head + text + tail`` with ``figures`` put back in place of their placeholders;
    ``ValueError`` when a placeholder is not in ``text`` exactly once."""
    for k, fig in enumerate(figures):
        if text.count(figure_mark(k)) != 1:
            raise ValueError(f"figure placeholder {figure_mark(k)} appears {text.count(figure_mark(k))} times "
                             "in the rewrite (expected once)")
        text = text.replace(figure_mark(k), fig)
    return head + text + tail


# a word that is no mathematics: two or more letters, lowercase after the first (not "AB"), with
# trailing punctuation; the article "a" before such a word ("A" only as the text's first word); or a
# figure placeholder; after the whitespace before it
_PLAIN_WORD = re.compile(r"\s*(?:\[figure \d+\]|[A-Za-z][a-z]+[,;:.]?|(?:a|^A)(?=\s+[a-z]{2}))(?=\s|$)")


def plain_opening(text: str, max_words: int = 12) -> str:
    """The text's opening run of plain words (at most ``max_words``; :data:`_PLAIN_WORD`): what a
    LaTeX rewrite copies unchanged. Prefilled after ``<formatted>`` it makes a small model start
    its copy at the first word instead of at the question it would rather answer."""
    end = 0
    for _ in range(max_words):
        m = _PLAIN_WORD.match(text, end)
        if m is None or (end == 0 and m.start() != m.end() and text[:1].isspace()):
            break
        end = m.end()
    return text[:end]
