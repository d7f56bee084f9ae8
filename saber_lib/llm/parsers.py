"""Strict parsers of model answers. Each returns the value or raises :class:`ParseError` with the
reason; none of them guesses.

Every parser first drops reasoning text that precedes the answer (:func:`strip_thinking`):
``<think>...</think>`` blocks (or everything before a lone ``</think>``) and GPT-OSS's analysis
channel (everything before the last ``assistantfinal`` / ``<|channel|>final<|message|>``).
"""
from __future__ import annotations

import difflib
import json
import re

from .types import ParseError

__all__ = ["ParseError", "strip_thinking", "parse_json_object", "parse_boxed_choice", "parse_boxed_int",
           "last_boxed", "parse_tagged", "parse_topic_scores", "label_scores", "topic_score_object", "check_best_at_one",
           "parse_summary", "parse_latex_rewrite"]

_FINAL_MARKERS = ("<|channel|>final<|message|>", "assistantfinal")
_THINK_BLOCK = re.compile(r"<think(?:ing)?>.*?</think(?:ing)?>", re.S | re.I)
_THINK_CLOSE = re.compile(r"</think(?:ing)?>", re.I)


def strip_thinking(text: str) -> str:
    """The answer part of a reply: reasoning blocks and the GPT-OSS analysis channel removed."""
    if not isinstance(text, str):
        raise ParseError(f"expected text, got {type(text).__name__}")
    for marker in _FINAL_MARKERS:
        pos = text.rfind(marker)
        if pos >= 0:
            text = text[pos + len(marker):]
            break
    text = _THINK_BLOCK.sub("", text)
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:
        text = text[closes[-1].end():]
    if re.search(r"<think(?:ing)?>", text, re.I):
        raise ParseError("reasoning block never closed (answer truncated?)")
    return text.strip()


# ----------------------------------------------------------------------------- JSON
_JSON_MARKS = re.compile(r'[{}"\\]')


def _object_spans(text: str) -> tuple[list[tuple[int, int]], int | None]:
    """Top-level ``{...}`` spans (string-aware) and the start of a trailing unclosed object.
    Only braces, quotes and backslashes matter, so only they are visited (every answer is scanned)."""
    spans, depth, start, in_str, escaped = [], 0, None, False, -1
    for m in _JSON_MARKS.finditer(text):
        i, ch = m.start(), m.group()
        if in_str:
            if i == escaped:        # the character after a backslash in a string
                continue
            if ch == "\\":
                escaped = i + 1
            elif ch == '"':
                in_str = False
            continue
        if ch == '"' and depth > 0:
            in_str = True
        elif ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                spans.append((start, i + 1))
                start = None
    return spans, (start if depth > 0 else None)


def _outside_strings(s: str, fn) -> str:
    """Apply ``fn`` to the pieces of JSON text outside string literals."""
    out, buf, i, n = [], [], 0, len(s)
    while i < n:
        ch = s[i]
        if ch == '"':
            out.append(fn("".join(buf)))
            buf = []
            j = i + 1
            while j < n and s[j] != '"':
                j += 2 if s[j] == "\\" else 1
            out.append(s[i:j + 1])
            i = j + 1
        else:
            buf.append(ch)
            i += 1
    out.append(fn("".join(buf)))
    return "".join(out)


_TRAILING_COMMA = re.compile(r",(\s*[}\]])")
_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|[\\/\"bfnrt]|.|$)", re.S)


def _fix_escape(m: re.Match) -> str:
    e = m.group(1)
    if len(e) == 5 or (len(e) == 1 and e in '\\/"bfnrt'):  # \uXXXX or a valid one-letter escape
        return m.group(0)
    return "\\\\" + e


def _repair(s: str) -> str:
    """Two common defects: trailing commas, and backslashes JSON does not allow (LaTeX such as
    ``\\(`` or ``\\sqrt``) which are doubled so they survive as written."""
    s = _outside_strings(s, lambda part: _TRAILING_COMMA.sub(r"\1", part))
    return _ESCAPE.sub(_fix_escape, s)


def parse_json_object(text: str) -> dict:
    """The last complete top-level JSON object of the answer.

    Steps: strip reasoning; if the answer has fenced code blocks, look only inside the last one
    that holds a ``{``; take the last balanced ``{...}``; parse it, else parse it after removing
    trailing commas and doubling invalid backslash escapes. Raises ParseError when there is no
    object, when an object opened after the last complete one is never closed (truncated), or
    when the object is not valid JSON even after the repair.
    """
    body = strip_thinking(text)
    fences = re.findall(r"```[a-zA-Z0-9_-]*[ \t]*\n?(.*?)```", body, re.S)
    fenced = [f for f in fences if "{" in f]
    if fenced:
        body = fenced[-1]
    elif "```" in body and body.count("```") % 2 == 1 and "{" in body.split("```")[-1]:
        body = body.split("```")[-1]  # an unclosed fence: its content is checked for truncation below
    spans, open_start = _object_spans(body)
    if open_start is not None and (not spans or open_start > spans[-1][0]):
        raise ParseError("JSON object is not closed (answer truncated?)")
    if not spans:
        raise ParseError("no JSON object in the answer")
    s, e = spans[-1]
    raw = body[s:e]
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError:
        try:
            obj = json.loads(_repair(raw))
        except json.JSONDecodeError as err:
            raise ParseError(f"invalid JSON object: {err.msg} at char {err.pos}") from None
    if not isinstance(obj, dict):  # pragma: no cover - spans are objects
        raise ParseError("answer is not a JSON object")
    return obj


# ----------------------------------------------------------------------------- \boxed{...}
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")


def _boxed_contents(text: str) -> tuple[list[str], bool]:
    """Contents of the top-level ``\\boxed{...}`` groups (nested boxes stay inside their parent),
    and whether a ``\\boxed{`` is left unclosed at the end."""
    out, i = [], 0
    while True:
        m = _BOXED.search(text, i)
        if m is None:
            return out, False
        depth, j = 1, m.end()
        while j < len(text) and depth:
            if text[j] == "\\" and j + 1 < len(text) and text[j + 1] in "{}":
                j += 2
                continue
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        if depth:
            return out, True
        out.append(text[m.end():j - 1])
        i = j


def last_boxed(text: str) -> str:
    """Content of the last top-level ``\\boxed{...}`` of the answer (reasoning stripped)."""
    boxes, unclosed = _boxed_contents(strip_thinking(text))
    if unclosed:
        raise ParseError("\\boxed{ is not closed (answer truncated?)")
    if not boxes:
        raise ParseError("no \\boxed{...} in the answer")
    return boxes[-1]


_WRAPPERS = re.compile(r"^\\(?:text|textbf|mathbf|mathrm|textrm|mbox)\s*\{(.*)\}$", re.S)


def _clean_box(s: str) -> str:
    """Whitespace, ``$``, redundant braces and a ``\\text{}``-style wrapper around a short answer."""
    prev = None
    while s != prev:
        prev = s
        s = s.strip().strip("$").strip()
        if s.startswith("{") and s.endswith("}") and _object_spans(s)[0] == [(0, len(s))]:
            s = s[1:-1]
        m = _WRAPPERS.match(s)
        if m:
            s = m.group(1)
    return s


def parse_boxed_choice(text: str, options=("1", "2")) -> str:
    """The option named in the last ``\\boxed{...}``; ParseError if it is none of ``options``."""
    got = _clean_box(last_boxed(text))
    if got not in options:
        raise ParseError(f"boxed answer {got[:40]!r} is not one of {list(options)}")
    return got


def parse_boxed_int(text: str, lo: int, hi: int) -> int:
    """The integer in the last ``\\boxed{...}``, checked to lie in ``[lo, hi]``."""
    got = _clean_box(last_boxed(text))
    if not re.fullmatch(r"[+-]?\d+", got):
        raise ParseError(f"boxed answer {got[:40]!r} is not an integer")
    v = int(got)
    if not lo <= v <= hi:
        raise ParseError(f"boxed answer {v} is outside [{lo}, {hi}]")
    return v


# ----------------------------------------------------------------------------- tags
def parse_tagged(text: str, tag: str, first: bool = False) -> str:
    """The content of the last ``<tag>...</tag>`` of the answer (``first``: of the first one); an
    opened, unclosed tag after it is a truncation."""
    body = strip_thinking(text)
    opens = [m.end() for m in re.finditer(f"<{re.escape(tag)}>", body)]
    closes = [m.start() for m in re.finditer(f"</{re.escape(tag)}>", body)]
    if not opens:
        raise ParseError(f"no <{tag}> block in the answer")
    last_open = opens[0 if first else -1]
    after = [c for c in closes if c >= last_open]
    if not after:
        raise ParseError(f"<{tag}> is not closed (answer truncated?)")
    return body[last_open:after[0]].strip("\n")


# ----------------------------------------------------------------------------- task parsers
_NOT_ALNUM = re.compile(r"[^0-9a-z]")


def _norm_label(s: str) -> str:
    return _NOT_ALNUM.sub("", str(s).casefold())


def topic_score_object(obj) -> dict:
    """The label -> score object of a topic answer: the ``scores`` member of
    ``{"best_label": ..., "scores": {...}}`` (the template's answer shape; the best label is named first
    only so that a model commits to it before it writes the scores), else the object itself (a flat
    ``{label: score}`` answer)."""
    if not isinstance(obj, dict):
        raise ParseError(f"expected a JSON object, got {type(obj).__name__}")
    inner = obj.get("scores")
    return inner if isinstance(inner, dict) else obj


def check_best_at_one(scores) -> None:
    """The topic answer's contract: the best-fitting label scores exactly 1.0. Raises ParseError
    when no score is 1.0 (in particular when every label scores 0.0, which assigns no topic)."""
    vals = [float(v) for v in scores.values()]
    if not vals or max(vals) == 1.0:
        return
    if max(vals) == 0.0:
        raise ParseError(f"every one of the {len(vals)} labels scored 0.0: the best-fitting label must get 1.0")
    best = max(scores, key=lambda k: float(scores[k]))
    raise ParseError(f"no label scored 1.0 (the highest is {best!r} at {float(scores[best])}): "
                     "the best-fitting label must get 1.0")


def label_scores(obj, labels, *, missing_is_zero: bool = False) -> dict[str, float]:
    """A parsed topic answer (alone or as its ``scores`` member: :func:`topic_score_object`) mapped
    onto ``labels``, in their order: the one reading of a topic answer.

    Keys match a label exactly, else after lower-casing and dropping everything but letters and digits
    (so "Number Theory", "number  theory" and "NumberTheory" are one label); keys that are no label
    are ignored. A value that is not a number in [0, 1] raises :class:`ParseError`; so does a missing
    label, unless ``missing_is_zero`` (then it scores 0.0).
    """
    obj = topic_score_object(obj)
    loose: dict[str, object] | None = None   # the keys normalized, made when a label is not a key as written
    out: dict[str, float] = {}
    missing = []
    for lab in dict.fromkeys(labels):
        if lab in obj:
            v = obj[lab]
        else:
            if loose is None:
                loose = {}
                for k, val in obj.items():
                    loose.setdefault(_norm_label(k), val)
            v = loose.get(_norm_label(lab), _MISSING)
        if v is _MISSING:
            missing.append(lab)
            out[lab] = 0.0
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ParseError(f"score of {lab!r} is not a number: {v!r}")
        if not 0.0 <= float(v) <= 1.0:
            raise ParseError(f"score of {lab!r} is outside [0, 1]: {v}")
        out[lab] = float(v)
    if missing and not missing_is_zero:
        raise ParseError(f"no score for {len(missing)} label(s): {missing[:5]}")
    return out


def parse_topic_scores(text: str, labels) -> dict[str, float]:
    """Topic relevance: a JSON object mapping each label to a number in [0, 1], alone or as the
    ``scores`` member of the answer (:func:`topic_score_object`), read by :func:`label_scores`.
    Every label must be present, and the best one with exactly 1.0 (:func:`check_best_at_one`).
    """
    out = label_scores(parse_json_object(text), labels)
    check_best_at_one(out)
    return out


_MISSING = object()


def parse_summary(text: str, max_words: int = 30) -> dict:
    """Solution summary JSON -> the summaries table's fields.

    Required keys: ``noCoreIdea`` (bool), ``coreIdea`` (string of at most ``max_words`` words, or
    null when ``noCoreIdea``), ``supportingIdeas`` (0-3 strings), ``keywords`` (strings),
    ``confidence`` (number in [0, 1]). Returns ``no_core_idea``, ``core_idea``,
    ``supporting_ideas``, ``keywords``, ``confidence``.
    """
    obj = parse_json_object(text)
    for key in ("noCoreIdea", "coreIdea", "supportingIdeas", "keywords", "confidence"):
        if key not in obj:
            raise ParseError(f"summary lacks key {key!r}")
    no_core = obj["noCoreIdea"]
    if not isinstance(no_core, bool):
        raise ParseError(f"noCoreIdea is not true/false: {no_core!r}")
    core = obj["coreIdea"]
    if core is not None and not isinstance(core, str):
        raise ParseError(f"coreIdea is not a string: {core!r}")
    core = core.strip() if isinstance(core, str) else None
    if core in ("", "null", "None"):
        core = None
    if not no_core:
        if core is None:
            raise ParseError("coreIdea is empty while noCoreIdea is false")
        n = len(core.split())
        if n > max_words:
            raise ParseError(f"coreIdea has {n} words (at most {max_words})")
    lists = {}
    for key, hi in (("supportingIdeas", 3), ("keywords", None)):
        v = obj[key]
        if v is None and no_core:
            v = []
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise ParseError(f"{key} is not a list of strings: {v!r}")
        if hi is not None and len(v) > hi:
            raise ParseError(f"{key} has {len(v)} entries (at most {hi})")
        lists[key] = [x.strip() for x in v if x.strip()]
    conf = obj["confidence"]
    if isinstance(conf, bool) or not isinstance(conf, (int, float)) or not 0.0 <= conf <= 1.0:
        raise ParseError(f"confidence is not a number in [0, 1]: {conf!r}")
    return {"no_core_idea": no_core, "core_idea": None if no_core else core,
            "supporting_ideas": lists["supportingIdeas"], "keywords": lists["keywords"],
            "confidence": float(conf)}


_DELIMS = re.compile(r"\\\(|\\\)|\\\[|\\\]|\$|\s+")


def parse_latex_rewrite(text: str, original: str | None = None, min_similarity: float = 0.98) -> str:
    """The rewritten text inside the first ``<formatted>...</formatted>`` (what a small model may add
    after it, e.g. a solution in a second block, is ignored).

    With ``original``, the content must be unchanged: after removing math delimiters (``$``,
    ``\\(``, ``\\)``, ``\\[``, ``\\]``) and whitespace from both, the ``difflib`` similarity ratio
    must reach ``min_similarity`` (1.0 demands identical content).
    """
    out = parse_tagged(text, "formatted", first=True).strip()
    if not out:
        raise ParseError("empty <formatted> block")
    if original is not None:
        a, b = _DELIMS.sub("", original), _DELIMS.sub("", out)
        if a != b:
            ratio = difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()
            if ratio < min_similarity:
                raise ParseError(f"rewrite changed the content (similarity {ratio:.3f} < {min_similarity})")
    return out
