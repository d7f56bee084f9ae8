"""Rewriters that keep the mathematics, and the flip rate of a judge under them (issue 15, part 2).

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
* :class:`LLMRewriter` - a paraphrase by any backend with ``chat_batch(requests)`` (requests are
  ``saber_lib.llm.types.ChatRequest``); a failed call keeps the text.
* the A/B order swap is not a text rewrite: :func:`flip_rates` handles it at the pair level
  (``"order_swap"``).
"""
from __future__ import annotations

import dataclasses
import re
from fractions import Fraction
from typing import Callable, Mapping, Sequence

import polars as pl

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


# ============================================================================ LLM paraphrase
PARAPHRASE_INSTRUCTION = (
    "Rewrite the following mathematics text in different words. Keep every mathematical fact, "
    "quantity, condition and formula exactly as it is (you may rename variables consistently), "
    "keep LaTeX for formulas, add nothing and leave nothing out. Answer with the rewritten text only.")


class LLMRewriter(Rewriter):
    """A paraphrase by an LLM backend (any object with ``chat_batch(requests)`` returning results
    with ``text`` and ``error``). Empty texts are not sent; a failed or empty answer keeps the
    original text and is counted in ``failures``."""

    name = "llm_paraphrase"

    def __init__(self, backend, instruction: str = PARAPHRASE_INSTRUCTION, temperature: float | None = 0.0,
                 max_tokens: int | None = None, name: str | None = None):
        self.backend = backend
        self.instruction = instruction
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.failures = 0
        if name:
            self.name = name

    def requests(self, texts: Sequence[str]) -> list:
        from ..llm.types import ChatRequest

        return [ChatRequest(messages=[{"role": "system", "content": self.instruction},
                                      {"role": "user", "content": t}],
                            temperature=self.temperature, max_tokens=self.max_tokens) for t in texts]

    def rewrite_group(self, texts):
        texts = list(texts)
        todo = [k for k, t in enumerate(texts) if t and t.strip()]
        if not todo:
            return texts
        results = self.backend.chat_batch(self.requests([texts[k] for k in todo]))
        out = list(texts)
        for k, r in zip(todo, results):
            new = (getattr(r, "text", "") or "").strip()
            if getattr(r, "error", None) is None and new:
                out[k] = new
            else:
                self.failures += 1
        return out


def default_rewriters() -> dict[str, Rewriter]:
    """The deterministic rewriters by name."""
    rs = [RenameVariables(), LatexToWords(), WordsToLatex(), NumberFormat("decimal"), NumberFormat("fraction"),
          NumberFormat("slash"), SentenceOrder()]
    return {r.name: r for r in rs}


# ============================================================================ flip rates
def _texts_of(item) -> list[str]:
    if isinstance(item, str):
        return [item]
    return [getattr(item, "problem", "") or "", getattr(item, "solution", "") or ""]


def _rebuild(item, texts):
    if isinstance(item, str):
        return texts[0]
    if dataclasses.is_dataclass(item):
        return dataclasses.replace(item, problem=texts[0], solution=texts[1])
    return type(item)(item.id, texts[0], texts[1])


def rewrite_triple(rewriter: Rewriter, query, a, b):
    """``(query, a, b)`` rewritten as one group (strings, or objects with ``problem`` and
    ``solution``, e.g. ``saber_lib.tournament.Doc``, rebuilt with their id kept)."""
    items = (query, a, b)
    sizes = [len(_texts_of(x)) for x in items]
    flat = [t for x in items for t in _texts_of(x)]
    new = rewriter.rewrite_group(flat)
    out, k = [], 0
    for x, n in zip(items, sizes):
        out.append(_rebuild(x, new[k:k + n]))
        k += n
    return tuple(out)


def normalize_outcome(o) -> str:
    """Judge answers -> ``a | b | tie | failure`` (1/2/0 of ``saber_lib.judges``, or the labels)."""
    if o in ("a", "b", "tie", "failure"):
        return o
    if o is None or (hasattr(o, "reason") and not o):
        return "failure"
    if o == 1:
        return "a"
    if o == 2:
        return "b"
    if o == 0:
        return "tie"
    raise ValueError(f"not a judge outcome: {o!r}")


def _judge_all(judge, items):
    if hasattr(judge, "judge_pairs"):
        return [normalize_outcome(o) for o in judge.judge_pairs(list(items))]
    return [normalize_outcome(judge(q, a, b)) for q, a, b in items]


SWAP_BACK = {"a": "b", "b": "a", "tie": "tie", "failure": "failure"}


def flip_rates(judge, triples: Sequence[tuple], rewriters: Mapping[str, Rewriter] | None = None,
               order_swap: bool = True) -> pl.DataFrame:
    """How often a judge's verdict changes under each transformation of ``(query, a, b)`` triples.

    ``judge``: an object with ``judge_pairs(items)`` (``saber_lib.judges.Judge``) or a callable
    ``judge(query, a, b)``. The verdict on the transformed triple is compared with the verdict on
    the original (for ``order_swap`` the pair is shown as ``(b, a)`` and the verdict mapped back);
    a flip is any change among triples where neither verdict failed (a tie against a preference
    counts). Columns: ``transformation, triples, changed`` (triples whose text the rewriter
    changed), ``compared, flips, flip_rate, flips_changed, flip_rate_changed`` (over the changed
    triples only), ``failures``."""
    rewriters = default_rewriters() if rewriters is None else dict(rewriters)
    triples = list(triples)
    base = _judge_all(judge, triples)
    rows = []
    plans = []
    if order_swap:
        plans.append(("order_swap", [(q, b, a) for q, a, b in triples], [True] * len(triples), True))
    for name, rw in rewriters.items():
        new = [rewrite_triple(rw, *t) for t in triples]
        changed = [n != t for n, t in zip(new, triples)]
        plans.append((name, new, changed, False))
    for name, items, changed, swapped in plans:
        got = _judge_all(judge, items)
        if swapped:
            got = [SWAP_BACK[o] for o in got]
        ok = [(b0, g) for b0, g in zip(base, got) if b0 != "failure" and g != "failure"]
        okc = [(b0, g) for (b0, g), c in zip(zip(base, got), changed) if c and b0 != "failure" and g != "failure"]
        flips = sum(b0 != g for b0, g in ok)
        flips_c = sum(b0 != g for b0, g in okc)
        rows.append((name, len(triples), int(sum(changed)), len(ok), flips, flips / len(ok) if ok else float("nan"),
                     flips_c, flips_c / len(okc) if okc else float("nan"),
                     sum(b0 == "failure" or g == "failure" for b0, g in zip(base, got))))
    return pl.DataFrame(rows, schema={"transformation": pl.String, "triples": pl.Int64, "changed": pl.Int64,
                                      "compared": pl.Int64, "flips": pl.Int64, "flip_rate": pl.Float64,
                                      "flips_changed": pl.Int64, "flip_rate_changed": pl.Float64,
                                      "failures": pl.Int64}, orient="row")
