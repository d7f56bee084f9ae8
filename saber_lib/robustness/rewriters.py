"""Deterministic rewriters that keep the mathematics (judge invariance, memorization probe).

Every rewriter maps a *group* of texts (the query and both candidates, or a query alone) to new
texts with :meth:`Rewriter.rewrite_group`, so that a change that must be consistent across texts
(renaming a variable) is the same in all of them; :meth:`Rewriter.rewrite` is the one-text case.
Each one is deterministic and returns its input unchanged when the text lacks the feature it
rewrites. Math spans are ``$...$``, ``$$...$$``, ``\\(...\\)`` and ``\\[...\\]``; whitespace inside
them is not significant (as in TeX math mode).

* :class:`RenameVariables` - single lower-case letters used as variables inside math spans get new
  letters, one bijection for the whole group, onto letters used nowhere in its math. Left alone:
  ``e`` and ``i`` (constants), letters inside commands (``\\frac``) and inside the arguments of
  text-like commands (``\\text{..}``, ``\\mathbb{..}``, ``\\operatorname{..}``, ...), known function
  names written without a backslash (``sin``, ``log``, ``gcd`` ...), short English words (``and``,
  ``if`` ...), and runs of four or more letters (words). Runs of two or three letters are products
  of variables (``xy``), except ``d`` followed by a letter (a differential ``dx``: the ``d`` stays).
  Prose outside math is not touched.
* :class:`LatexToWords` / :class:`WordsToLatex` - a small fixed vocabulary inside math spans:
  ``\\frac{a}{b}`` <-> ``(a over b)`` (simple arguments only), ``x^2`` <-> ``x squared``,
  ``x^3`` <-> ``x cubed``, ``\\sqrt{a}`` <-> ``(square root of a)``, ``\\cdot``/``\\times`` ->
  ``times`` (-> ``\\cdot``), ``\\le(q)`` <-> ``is at most``, ``\\ge(q)`` <-> ``is at least``,
  ``\\ne(q)`` <-> ``is not equal to``, ``\\pm`` <-> ``plus or minus``, ``\\infty`` <-> ``infinity``,
  ``\\pi`` <-> ``pi``. The parentheses make the inverse unambiguous.
* :class:`NumberFormat` - exact changes of number format: ``1/2``, ``\\frac12``, ``\\frac{1}{2}``
  and ``0.5`` become the chosen style (``decimal``: only when the decimal terminates within six
  places; ``fraction``: ``\\frac{p}{q}`` in lowest terms; ``slash``: ``p/q``, parenthesized inside
  math). A number glued to a digit on either side (``2\\frac12``: a mixed number or a product?) is
  left alone, and so are slashes in dates or paths (``1/2/2020``).
* :class:`SentenceOrder` - swaps adjacent sentences of a paragraph when the swap is safe: neither
  refers back (``this``, ``it``, ``then``, ``thus``, ``such`` ...), neither is a question or the
  paragraph's last sentence, neither holds a colon, and they share no math variable and no
  capitalized name. Pairs are taken left to right.

The LLM paraphrase (:class:`~saber_lib.robustness.invariance.LLMRewriter`) and the flip rates of a
judge under these rewriters (:func:`~saber_lib.robustness.invariance.flip_rates`, the A/B order swap
included) live in :mod:`.invariance`.
"""
from __future__ import annotations

import re
from fractions import Fraction
from typing import Callable, Mapping, Sequence

MATH_RE = re.compile(r"\$\$(.+?)\$\$|(?<!\\)\$((?:\\.|[^$\\])+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.S)


def math_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of the inner content of every math span."""
    out = []
    for m in MATH_RE.finditer(text):
        g = next(i for i in range(1, 5) if m.group(i) is not None)
        out.append((m.start(g), m.end(g)))
    return out


def map_math(text: str, fn: Callable[[str], str]) -> str:
    """``text`` with ``fn`` applied to the inner content of every math span (delimiters kept)."""
    parts, last = [], 0
    for s, e in math_spans(text):
        parts.append(text[last:s])
        parts.append(fn(text[s:e]))
        last = e
    parts.append(text[last:])
    return "".join(parts)


def map_prose(text: str, fn: Callable[[str], str]) -> str:
    """``text`` with ``fn`` applied to every stretch outside math spans (delimiters included there)."""
    parts, last = [], 0
    for m in MATH_RE.finditer(text):
        parts.append(fn(text[last:m.start()]))
        parts.append(m.group(0))
        last = m.end()
    parts.append(fn(text[last:]))
    return "".join(parts)


class Rewriter:
    """A deterministic text transformation that keeps the mathematics."""

    name = "rewriter"

    def rewrite(self, text: str) -> str:
        return self.rewrite_group([text])[0]

    def rewrite_group(self, texts: Sequence[str]) -> list[str]:
        return [self._one(t) for t in texts]

    def _one(self, text: str) -> str:
        raise NotImplementedError

    def __call__(self, text: str) -> str:
        return self.rewrite(text)


# ============================================================================ variable renaming
TEXT_COMMANDS = {"text", "textrm", "textbf", "textit", "texttt", "textsf", "mathrm", "mathbf", "mathbb", "mathcal",
                 "mathfrak", "mathscr", "mathsf", "mathit", "operatorname", "mbox", "hbox", "begin", "end", "label",
                 "tag", "ref", "color", "textcolor"}
FUNCTION_WORDS = {"sin", "cos", "tan", "cot", "sec", "csc", "log", "ln", "lg", "exp", "lim", "max", "min", "gcd",
                  "lcm", "mod", "det", "deg", "dim", "ker", "arg", "sup", "inf", "and", "or", "if", "for", "the",
                  "is", "of", "to", "in", "on", "at", "by", "be", "as", "are", "an", "not", "all", "some", "with",
                  "cm", "km", "kg", "mm", "ft", "th", "st", "nd", "rd", "pm", "am", "sinh", "cosh", "tanh", "mid"}
RESERVED = set("ei")
TARGETS = "uvwtsrqpmnkhgjfbcalyzxod"
_TOKEN = re.compile(r"\\[A-Za-z]+|\\.|[A-Za-z]+|\s+|.", re.S)


def _skip_group(s: str, pos: int) -> int:
    """End of a ``{...}`` group (balanced) or single character starting at ``pos`` (after spaces)."""
    j = pos
    while j < len(s) and s[j] == " ":
        j += 1
    if j < len(s) and s[j] == "{":
        depth = 0
        for k in range(j, len(s)):
            if s[k] == "{" and (k == 0 or s[k - 1] != "\\"):
                depth += 1
            elif s[k] == "}" and s[k - 1] != "\\":
                depth -= 1
                if depth == 0:
                    return k + 1
        return len(s)
    return min(j + 1, len(s)) if j < len(s) else j


def _math_tokens(s: str):
    """(kind, text) tokens of math content: 'var' single-letter variables, 'keep' everything else."""
    out = []
    pos = 0
    while pos < len(s):
        m = _TOKEN.match(s, pos)
        tok = m.group(0)
        end = m.end()
        if tok.startswith("\\") and tok[1:] in TEXT_COMMANDS:
            end = _skip_group(s, end)
            if tok[1:] == "textcolor":  # \textcolor{c}{text}: both groups
                end = _skip_group(s, end)
            out.append(("keep", s[pos:end]))
        elif tok.isalpha():
            low = tok.lower()
            if len(tok) == 1:
                out.append(("var" if tok.islower() and tok not in RESERVED else "keep", tok))
            elif low in FUNCTION_WORDS or len(tok) >= 4:
                out.append(("keep", tok))
            elif len(tok) == 2 and tok[0] == "d" and tok[1].islower():
                out.append(("keep", "d"))
                out.append(("var" if tok[1] not in RESERVED else "keep", tok[1]))
            else:
                for ch in tok:
                    out.append(("var" if ch.islower() and ch not in RESERVED else "keep", ch))
        else:
            out.append(("keep", tok))
        pos = end
    return out


class RenameVariables(Rewriter):
    """Consistent renaming of single-letter math variables across a group (module docstring).
    ``mapping`` (optional) fixes the renaming; otherwise the variables, in alphabetical order, take
    the first letters of ``targets`` that occur nowhere in the group's math."""

    name = "rename_variables"

    def __init__(self, mapping: Mapping[str, str] | None = None, targets: str = TARGETS):
        self.mapping = dict(mapping) if mapping else None
        self.targets = targets

    def variables(self, texts: Sequence[str]) -> set[str]:
        found = set()
        for t in texts:
            for s, e in math_spans(t):
                found |= {x for k, x in _math_tokens(t[s:e]) if k == "var"}
        return found

    def plan(self, texts: Sequence[str]) -> dict[str, str]:
        """The renaming used for this group."""
        if self.mapping is not None:
            return dict(self.mapping)
        found = self.variables(texts)
        used = set()
        for t in texts:
            for s, e in math_spans(t):
                used |= set(re.sub(r"\\[A-Za-z]+", " ", t[s:e]))
        free = [c for c in self.targets if c not in used and c not in found and c not in RESERVED]
        return {v: free[k] for k, v in enumerate(sorted(found)) if k < len(free)}

    def rewrite_group(self, texts):
        plan = self.plan(texts)
        if not plan:
            return list(texts)

        def fn(s):
            return "".join(plan.get(x, x) if k == "var" else x for k, x in _math_tokens(s))

        return [map_math(t, fn) for t in texts]


# ============================================================================ LaTeX <-> words
_SIMPLE = r"[A-Za-z0-9.]+"
_FWD = [
    (re.compile(r"\\[dt]?frac\s*\{\s*(" + _SIMPLE + r")\s*\}\s*\{\s*(" + _SIMPLE + r")\s*\}"), r" (\1 over \2) "),
    (re.compile(r"\\[dt]?frac\s*([0-9A-Za-z])\s*([0-9A-Za-z])"), r" (\1 over \2) "),
    (re.compile(r"\\sqrt\s*\{\s*(" + _SIMPLE + r")\s*\}"), r" (square root of \1) "),
    (re.compile(r"\^\s*(?:\{\s*2\s*\}|2(?![0-9]))"), " squared "),
    (re.compile(r"\^\s*(?:\{\s*3\s*\}|3(?![0-9]))"), " cubed "),
    (re.compile(r"\\(?:cdot|times)(?![A-Za-z])"), " times "),
    (re.compile(r"\\(?:leq?|leqslant)(?![A-Za-z])"), " is at most "),
    (re.compile(r"\\(?:geq?|geqslant)(?![A-Za-z])"), " is at least "),
    (re.compile(r"\\(?:neq?)(?![A-Za-z])"), " is not equal to "),
    (re.compile(r"\\pm(?![A-Za-z])"), " plus or minus "),
    (re.compile(r"\\infty(?![A-Za-z])"), " infinity "),
    (re.compile(r"\\pi(?![A-Za-z])"), " pi "),
]
_BACK = [
    (re.compile(r"\(\s*(" + _SIMPLE + r")\s+over\s+(" + _SIMPLE + r")\s*\)"), r"\\frac{\1}{\2}"),
    (re.compile(r"\(\s*square root of\s+(" + _SIMPLE + r")\s*\)"), r"\\sqrt{\1}"),
    (re.compile(r"\s*\bsquared\b"), "^2"),
    (re.compile(r"\s*\bcubed\b"), "^3"),
    (re.compile(r"\btimes\b"), r"\\cdot "),
    (re.compile(r"\bis at most\b"), r"\\le "),
    (re.compile(r"\bis at least\b"), r"\\ge "),
    (re.compile(r"\bis not equal to\b"), r"\\ne "),
    (re.compile(r"\bplus or minus\b"), r"\\pm "),
    (re.compile(r"\binfinity\b"), r"\\infty "),
    (re.compile(r"(?<!\\)\bpi\b"), r"\\pi "),
]


def _tidy(s: str, keep_edges: str) -> str:
    inner = re.sub(r"[ \t]{2,}", " ", s)
    lead = " " if keep_edges.startswith((" ", "\t")) else ""
    trail = " " if keep_edges.endswith((" ", "\t")) else ""
    return lead + inner.strip(" \t") + trail if inner.strip() else s


class LatexToWords(Rewriter):
    """A fixed vocabulary of LaTeX written as words inside math spans (module docstring)."""

    name = "latex_to_words"

    def _one(self, text):
        def fn(s):
            out = s
            for pat, rep in _FWD:
                out = pat.sub(rep, out)
            return s if out == s else _tidy(out, s)

        return map_math(text, fn)


class WordsToLatex(Rewriter):
    """The inverse of :class:`LatexToWords` (words of its vocabulary inside math spans -> LaTeX)."""

    name = "words_to_latex"

    def _one(self, text):
        def fn(s):
            out = s
            for pat, rep in _BACK:
                out = pat.sub(rep, out)
            return s if out == s else _tidy(out, s)

        return map_math(text, fn)


# ============================================================================ number format
_FRAC_BRACED = r"\\[dt]?frac\s*\{\s*(-?\d+)\s*\}\s*\{\s*(\d+)\s*\}"
_FRAC_SHORT = r"\\[dt]?frac\s*(\d)\s*(\d)(?!\d)"
_SLASH = r"(?<![\w/.])(-?\d+)\s*/\s*(\d+)(?![\w/]|\.\d)"
_DECIMAL = r"(?<![\w.])(-?\d+\.\d+)(?![\d]|\.\d)"
_NUM_RE = re.compile("|".join([_FRAC_BRACED, _FRAC_SHORT, _SLASH, _DECIMAL]))


def _terminating(f: Fraction, places: int = 6):
    q = f.denominator
    for p in (2, 5):
        while q % p == 0:
            q //= p
    if q != 1:
        return None
    for k in range(places + 1):
        if (f * 10 ** k).denominator == 1:
            v = f"{abs(f.numerator) * 10 ** k // f.denominator}"
            if k:
                v = v.rjust(k + 1, "0")
                v = v[:-k] + "." + v[-k:]
            return ("-" if f < 0 else "") + v
    return None


class NumberFormat(Rewriter):
    """Rewrites exact numbers to one ``style``: ``decimal`` | ``fraction`` | ``slash`` (module
    docstring). In prose, a ``fraction`` is wrapped in ``$...$``."""

    STYLES = ("decimal", "fraction", "slash")

    def __init__(self, style: str = "decimal", max_places: int = 6):
        if style not in self.STYLES:
            raise ValueError(f"unknown style {style!r} (expected one of {self.STYLES})")
        self.style = style
        self.max_places = max_places
        self.name = f"number_{style}"

    def _render(self, f: Fraction, in_math: bool, was_decimal: bool):
        if self.style == "decimal":
            return None if was_decimal else _terminating(f, self.max_places)
        if f.denominator == 1 and not was_decimal:
            return None
        if self.style == "fraction":
            sign = "-" if f < 0 else ""
            body = f"{sign}\\frac{{{abs(f.numerator)}}}{{{f.denominator}}}"
            return body if in_math else f"${body}$"
        body = f"{f.numerator}/{f.denominator}"
        return f"({body})" if in_math else body

    def _convert(self, s: str, in_math: bool) -> str:
        def rep(m):
            g = m.groups()
            start, end = m.start(), m.end()
            if (start > 0 and (s[start - 1].isdigit() or s[start - 1] == ".")) or (end < len(s) and s[end].isdigit()):
                return m.group(0)
            was_decimal = g[6] is not None
            if g[0] is not None:
                p, q = int(g[0]), int(g[1])
            elif g[2] is not None:
                p, q = int(g[2]), int(g[3])
            elif g[4] is not None:
                if not in_math and self.style != "decimal":
                    return m.group(0)  # a slash in prose stays prose unless it becomes a decimal
                p, q = int(g[4]), int(g[5])
            else:
                f = Fraction(g[6])
                p, q = f.numerator, f.denominator
                if len(g[6].split(".")[1]) > self.max_places:
                    return m.group(0)
            if q == 0:
                return m.group(0)
            out = self._render(Fraction(p, q), in_math, was_decimal)
            if out is None:
                return m.group(0)
            if self.style == "slash" and g[4] is not None:
                return m.group(0)  # already a slash
            return out

        return _NUM_RE.sub(rep, s)

    def _one(self, text):
        t = map_math(text, lambda s: self._convert(s, True))
        return map_prose(t, lambda s: self._convert(s, False))


# ============================================================================ sentence order
REFERENCE_WORDS = {"this", "that", "these", "those", "it", "its", "they", "them", "their", "then", "thus", "hence",
                   "therefore", "so", "such", "also", "above", "below", "previous", "previously", "following",
                   "next", "finally", "similarly", "here", "there", "same", "latter", "former", "again", "now",
                   "which", "where", "after", "before", "other", "another", "both", "he", "she", "his", "her",
                   "him", "we", "our", "us", "otherwise", "consequently", "since", "because", "but", "however",
                   "furthermore", "moreover", "additionally", "second", "third", "last", "lastly", "remaining",
                   "rest", "respectively", "similar", "said"}
ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "vs.", "Mr.", "Mrs.", "Ms.", "Dr.", "Fig.", "Eq.", "No.", "cf.", "St.")
_BOUNDARY = re.compile(r"(?<=[.!?])\s+(?=[A-Z$\\])")


def split_sentences(paragraph: str) -> list[str]:
    """Sentences of a paragraph with the whitespace that follows each (so ``"".join`` restores it);
    no split inside math or after a common abbreviation."""
    spans = math_spans(paragraph)
    cuts = []
    for m in _BOUNDARY.finditer(paragraph):
        if any(s <= m.start() < e for s, e in spans):
            continue
        before = paragraph[:m.start()]
        if before.endswith(ABBREVIATIONS) or re.search(r"\b[A-Za-z]\.$", before):
            continue
        cuts.append(m.end())
    out, last = [], 0
    for c in cuts:
        out.append(paragraph[last:c])
        last = c
    out.append(paragraph[last:])
    return [s for s in out if s]


def _sentence_vars(s: str) -> set[str]:
    out = set()
    for a, b in math_spans(s):
        out |= {x for k, x in _math_tokens(s[a:b]) if k == "var"} | set(re.findall(r"[A-Z]", s[a:b]))
    prose = map_math(s, lambda _: "")
    names = re.findall(r"(?<!^)(?<![.!?]\s)\b[A-Z][a-z]+\b", prose.strip())
    first = re.match(r"\s*([A-Z][a-z]+)", prose)
    return out | set(names) | ({first.group(1)} if first and first.group(1).lower() not in _COMMON_STARTS else set())


_COMMON_STARTS = {"let", "suppose", "assume", "given", "find", "compute", "show", "prove", "determine", "a", "an",
                  "the", "there", "if", "for", "what", "how", "each", "every", "all", "in"}


def _movable(s: str) -> bool:
    body = s.strip()
    if not body or body.endswith("?") or ":" in map_math(body, lambda _: ""):
        return False
    words = {w.lower() for w in re.findall(r"[A-Za-z]+", map_math(body, lambda _: " "))}
    return not (words & REFERENCE_WORDS)


class SentenceOrder(Rewriter):
    """Swaps adjacent independent sentences (module docstring)."""

    name = "sentence_order"

    def _paragraph(self, p: str) -> str:
        sents = split_sentences(p)
        if len(sents) < 3:
            return p
        # keep each sentence's trailing whitespace in its slot, move only the text
        bodies = [s.rstrip() for s in sents]
        gaps = [s[len(s.rstrip()):] for s in sents]
        k = 0
        last = len(bodies) - 1
        while k + 1 < last:
            a, b = bodies[k], bodies[k + 1]
            if _movable(a) and _movable(b) and not (_sentence_vars(a) & _sentence_vars(b)):
                bodies[k], bodies[k + 1] = b, a
                k += 2
            else:
                k += 1
        return "".join(b + g for b, g in zip(bodies, gaps))

    def _one(self, text):
        parts = re.split(r"(\n\s*\n)", text)
        return "".join(p if i % 2 else self._paragraph(p) for i, p in enumerate(parts))


def default_rewriters() -> dict[str, Rewriter]:
    """The deterministic rewriters by name."""
    rs = [RenameVariables(), LatexToWords(), WordsToLatex(), NumberFormat("decimal"), NumberFormat("fraction"),
          NumberFormat("slash"), SentenceOrder()]
    return {r.name: r for r in rs}
