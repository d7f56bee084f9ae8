"""Prompt templates (one ``.txt`` file each, in this folder) and the parser of each one's answer.

Template format: sections introduced by a line ``=== system ===``, ``=== user ===`` or
``=== assistant ===`` (an assistant section, last, is a prefill the model continues); fields are
written ``{{name}}`` and filled in one pass (text inserted into a field is never expanded again).

| name | fields | answer | parser |
|---|---|---|---|
| ``topic_scoring`` | problem, solution, labels (list) | JSON ``{"best_label": label, "scores": {label: relevance in [0,1]}}``, the best at 1.0 | ``parse_topic_scores(labels)`` |
| ``solution_summary`` | problem, solution, max_words | JSON noCoreIdea, coreIdea, supportingIdeas, keywords, confidence | ``parse_summary(max_words)`` |
| ``pairwise_judge`` | query_problem, query_solution, problem_1, solution_1, problem_2, solution_2 | notes, then ``\\boxed{1}`` or ``\\boxed{2}`` | ``parse_boxed_choice`` |
| ``pairwise_judge_logprob`` | same as pairwise_judge | prefill ``\\boxed{``; read with ``choice_logprobs`` / ``logprob_pairwise`` | ``parse_boxed_choice`` |
| ``ordinal_judge`` | query_problem, query_solution, problem, solution | notes, then ``\\boxed{N}``, N in 0..100 | ``parse_boxed_int(0, 100)`` |
| ``ordinal_judge_score`` | same as ordinal_judge | prefill ``\\boxed{``; the score only (small models) | ``parse_boxed_int(0, 100)`` |
| ``latex_format`` | text | prefill ``<formatted>`` (+ the text's plain opening words); the rewrite, then ``</formatted>`` | ``parse_latex_rewrite(original=text)`` |

The topic answer names its best label before the scores only as a decoding aid: guided decoding writes
the keys in the schema's order, and a small model made to write ``"Algebra": 0.0, ...`` before it has
chosen tends to score every label 0.0; named first, the best label then gets its 1.0. The parsed value
is the per-label scores alone (``best_label`` is not read; a flat ``{label: relevance}`` object parses too).

API: ``render(name, **fields) -> list[message]``, ``request(name, guided=False, **fields) ->
ChatRequest``, ``parser(name, **fields) -> callable(text)``, ``json_schema(name, **fields)``,
``names()``.

May import: ``llm`` (parsers and request types).
"""
from __future__ import annotations

import re
from functools import lru_cache, partial
from pathlib import Path
from typing import Any, Callable

from ..llm import parsers
from ..llm.types import ChatRequest

HERE = Path(__file__).resolve().parent
_SECTION = re.compile(r"^=== (system|user|assistant) ===[ \t]*$", re.M)
_FIELD = re.compile(r"\{\{(\w+)\}\}")

PAIR_FIELDS = ("query_problem", "query_solution", "problem_1", "solution_1", "problem_2", "solution_2")
FIELDS: dict[str, tuple[str, ...]] = {
    "topic_scoring": ("problem", "solution", "labels"),
    "solution_summary": ("problem", "solution", "max_words"),
    "pairwise_judge": PAIR_FIELDS,
    "pairwise_judge_logprob": PAIR_FIELDS,
    "ordinal_judge": ("query_problem", "query_solution", "problem", "solution"),
    "ordinal_judge_score": ("query_problem", "query_solution", "problem", "solution"),
    "latex_format": ("text",),
}


def names() -> list[str]:
    return sorted(FIELDS)


@lru_cache(maxsize=None)
def template(name: str) -> tuple[tuple[str, str], ...]:
    """The (role, text) sections of a template file."""
    if name not in FIELDS:
        raise KeyError(f"unknown prompt {name!r} (known: {', '.join(names())})")
    path = HERE / f"{name}.txt"
    raw = path.read_text(encoding="utf-8")
    marks = list(_SECTION.finditer(raw))
    if not marks or raw[:marks[0].start()].strip():
        raise ValueError(f"{path}: must start with a '=== system|user|assistant ===' line")
    out = []
    for k, m in enumerate(marks):
        end = marks[k + 1].start() if k + 1 < len(marks) else len(raw)
        text = raw[m.end():end].strip("\n")
        if m.group(1) == "assistant":
            text = text.rstrip("\n")
            if k != len(marks) - 1:
                raise ValueError(f"{path}: the assistant prefill must be the last section")
        else:
            text = text.strip()
        out.append((m.group(1), text))
    used = set(_FIELD.findall(raw))
    if used != set(FIELDS[name]):
        raise ValueError(f"{path}: fields {sorted(used)} differ from the declared {sorted(FIELDS[name])}")
    return tuple(out)


def _format(name: str, key: str, v: Any) -> str:
    if isinstance(v, (list, tuple)):
        if not all(isinstance(x, str) for x in v):
            raise TypeError(f"prompt {name!r}: field {key!r} must be a list of strings")
        return "\n".join(v)
    if isinstance(v, bool) or v is None:
        raise TypeError(f"prompt {name!r}: field {key!r} is {v!r}")
    if isinstance(v, (int, float, str)):
        return str(v)
    raise TypeError(f"prompt {name!r}: field {key!r} has type {type(v).__name__}")


def render(name: str, **fields) -> list[dict[str, str]]:
    """Chat messages of prompt ``name`` with its fields filled in."""
    want = FIELDS.get(name)
    if want is None:
        raise KeyError(f"unknown prompt {name!r} (known: {', '.join(names())})")
    missing = [k for k in want if k not in fields]
    extra = [k for k in fields if k not in want]
    if missing or extra:
        raise TypeError(f"prompt {name!r}: missing fields {missing}, unknown fields {extra}")
    values = {k: _format(name, k, v) for k, v in fields.items()}
    return [{"role": role, "content": _FIELD.sub(lambda m: values[m.group(1)], text)}
            for role, text in template(name)]


CORE_IDEA_PATTERN = '^[^"$\\\\=<>^*+/\u2264\u2265\u2260\u2261]*$'
SUMMARY_SCHEMA = {
    "type": "object",
    "properties": {
        "noCoreIdea": {"type": "boolean"},
        # plain words only, as the summaries' no-equation check demands: no $, backslash, relation or
        # operator sign (guided decoding then cannot write "$f(x)=cx$" into the core idea)
        "coreIdea": {"anyOf": [{"type": "string", "pattern": CORE_IDEA_PATTERN}, {"type": "null"}]},
        "supportingIdeas": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        "keywords": {"type": "array", "items": {"type": "string"}},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
    },
    "required": ["noCoreIdea", "coreIdea", "supportingIdeas", "keywords", "confidence"],
    "additionalProperties": False,
}


def json_schema(name: str, **fields) -> dict | None:
    """The JSON schema of the answer for guided decoding (``None`` for free-text prompts)."""
    if name == "topic_scoring":   # the best label first (a decoding aid), then every label's score in order
        labels = list(dict.fromkeys(fields["labels"]))
        scores = {"type": "object",
                  "properties": {lab: {"type": "number", "minimum": 0, "maximum": 1} for lab in labels},
                  "required": labels, "additionalProperties": False}
        return {"type": "object", "properties": {"best_label": {"type": "string", "enum": labels}, "scores": scores},
                "required": ["best_label", "scores"], "additionalProperties": False}
    if name == "solution_summary":
        return SUMMARY_SCHEMA
    return None


def request(name: str, *, guided: bool = False, temperature: float | None = None,
            max_tokens: int | None = None, meta: dict | None = None, prefill: str = "", **fields) -> ChatRequest:
    """A ChatRequest for prompt ``name``. ``guided=True`` constrains JSON answers to the schema
    (useful for small local models; the paper's setting asks by prompt alone). ``prefill``: text
    appended to the template's prefill (the answer's first words, e.g. the opening words a rewrite
    must copy). The request's ``meta`` names the template (plus ``meta``: ids of what it is
    about), for cassettes."""
    schema = json_schema(name, **fields) if guided else None
    parse = {k: list(fields[k]) if k == "labels" else fields[k] for k in PARSER_FIELDS.get(name, ()) if k in fields}
    messages = render(name, **fields)
    if prefill:
        if messages[-1]["role"] == "assistant":
            messages[-1] = {"role": "assistant", "content": messages[-1]["content"] + prefill}
        else:
            messages.append({"role": "assistant", "content": prefill})
    return ChatRequest(messages=messages, temperature=temperature, max_tokens=max_tokens,
                       json_schema=schema, meta={"template": name, **parse, **(meta or {})})


# the fields each template's parser needs; prompts.request keeps them in ChatRequest.meta so that a
# recorded answer can be parsed again later (saber_lib.llm.cassette)
PARSER_FIELDS = {"topic_scoring": ("labels",), "solution_summary": ("max_words",), "latex_format": ("text",)}


def parser(name: str, **fields) -> Callable[[str], Any]:
    """The strict parser of prompt ``name``'s answer. Needs ``labels`` for topic_scoring,
    ``max_words`` for solution_summary, ``text`` (the original) for latex_format."""
    if name == "topic_scoring":
        return partial(parsers.parse_topic_scores, labels=list(fields["labels"]))
    if name == "solution_summary":
        return partial(parsers.parse_summary, max_words=int(fields["max_words"]))
    if name in ("pairwise_judge", "pairwise_judge_logprob"):
        return partial(parsers.parse_boxed_choice, options=("1", "2"))
    if name in ("ordinal_judge", "ordinal_judge_score"):
        return partial(parsers.parse_boxed_int, lo=0, hi=100)
    if name == "latex_format":
        return partial(parsers.parse_latex_rewrite, original=fields.get("text"))
    raise KeyError(f"unknown prompt {name!r} (known: {', '.join(names())})")
