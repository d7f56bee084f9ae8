"""Solution summaries (paper 3.3): the text whose token set the summary signal compares.

Two summarizers, named in every artifact (``info.json`` and the ``summarizer`` column):

* ``llm`` (the paper's): prompt ``solution_summary`` through :mod:`saber_lib.llm`, parsed with
  ``parse_summary``; then validated: ``coreIdea`` has at most ``core_idea_max_words`` words and no
  equations or computations (:func:`equation_violations`). An answer that fails validation is
  asked again (``summary_retries`` times, as a new call); violations are counted by kind; what
  still fails is recorded as ``failed`` with the reason.
* ``extractive`` (CPU, no model): TF-IDF over all solutions with their mathematics removed; the
  core idea is the solution sentence closest to its own solution (cosine of TF-IDF vectors),
  cut to ``core_idea_max_words`` words; keywords are the solution's top TF-IDF unigrams and
  bigrams. ``summary_text`` = core idea + keywords. Not the paper's setting.

Output (CONTRIBUTING): ``doc_id, no_core_idea, core_idea, supporting_ideas, keywords, confidence,
summary_text, failed`` (+ ``failure_reason``, ``summarizer``).
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import polars as pl

from ..llm.parsers import parse_summary
from ..llm.retry import run_with_parser
from ..llm.types import Failure, ParseError
from ..prompts import request
from ..core.text import stop_words, summary_tokens

SUMMARY_COLUMNS = ("doc_id", "no_core_idea", "core_idea", "supporting_ideas", "keywords", "confidence",
                   "summary_text", "failed", "failure_reason", "summarizer")

# ----------------------------------------------------------------------------- validation
_VIOLATIONS = (
    ("latex", re.compile(r"\$|\\[a-zA-Z(\[]|\\\\")),
    ("relation", re.compile(r"[=<>\u2264\u2265\u2260\u2261]")),
    ("arithmetic", re.compile(r"\d\s*[-+*/\u00d7\u00f7^]\s*[\d(a-zA-Z]|[a-zA-Z)]\s*[+*/^]\s*\d")),
    ("algebra", re.compile(r"(?<![A-Za-z])[a-zA-Z]\s*(?:\^|\*\*|[+*/])\s*[a-zA-Z0-9(](?![A-Za-z]{2})")),
)


def equation_violations(text: str | None) -> list[str]:
    """Kinds of equation/computation found in ``text``: latex ($, \\cmd), relation (=, <, >, ...),
    arithmetic (digits with operators), algebra (x^2, a+b). Empty list: clean."""
    if not text:
        return []
    return [name for name, rx in _VIOLATIONS if rx.search(text)]


@dataclass
class SummaryValidator:
    """A parser for ``run_with_parser``: ``parse_summary`` + the no-equation rule, with counts."""

    max_words: int
    counts: Counter = field(default_factory=Counter)

    def __call__(self, text: str) -> dict:
        try:
            out = parse_summary(text, max_words=self.max_words)
        except ParseError as e:
            msg = str(e)
            self.counts["too_long" if "words" in msg else "unparseable"] += 1
            raise
        bad = equation_violations(out["core_idea"])
        if bad:
            for b in bad:
                self.counts[b] += 1
            raise ParseError(f"coreIdea contains {', '.join(bad)}: {out['core_idea']!r}")
        return out


def summarize_llm(backend, doc_ids: Sequence[str], problems: Sequence[str], solutions: Sequence[str], *,
                  max_words: int = 30, retries: int = 1, guided: bool = False):
    """Summaries by the LLM; returns ``(rows, validation counts)``. One row per problem."""
    reqs = [request("solution_summary", guided=guided, problem=p or "", solution=s or "",
                    max_words=max_words) for p, s in zip(problems, solutions)]
    val = SummaryValidator(max_words)
    res = run_with_parser(backend, reqs, val, retries=retries, desc="summaries")
    name = f"llm:{getattr(backend, 'model_id', getattr(backend, 'name', 'unknown'))}"
    rows = []
    for d, r in zip(doc_ids, res):
        if isinstance(r, Failure):
            rows.append(_row(d, None, True, r.reason, name))
        else:
            rows.append(_row(d, r, False, None, name))
    return rows, dict(val.counts)


def _row(doc_id, parsed, failed, reason, summarizer, summary_text=None):
    if parsed is None:
        parsed = {"no_core_idea": False, "core_idea": None, "supporting_ideas": [], "keywords": [],
                  "confidence": None}
    core = parsed["core_idea"]
    text = summary_text if summary_text is not None else (core or "")
    if parsed["no_core_idea"] or failed:
        text = ""
    return {"doc_id": doc_id, "no_core_idea": bool(parsed["no_core_idea"]), "core_idea": core,
            "supporting_ideas": list(parsed["supporting_ideas"]), "keywords": list(parsed["keywords"]),
            "confidence": parsed["confidence"], "summary_text": text, "failed": bool(failed),
            "failure_reason": reason, "summarizer": summarizer}


# ----------------------------------------------------------------------------- extractive
_MATH = re.compile(r"\$\$.*?\$\$|\$.*?\$|\\\[.*?\\\]|\\\(.*?\\\)|\\begin\{(\w+\*?)\}.*?\\end\{\1\}", re.S)
_CMD = re.compile(r"\\[a-zA-Z]+\*?|[{}_^]")
_SENT = re.compile(r"(?<=[.!?;:])\s+|\n\s*\n")
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*")


def strip_math(text: str) -> str:
    """Remove display/inline math and LaTeX commands; what remains is the prose."""
    text = _MATH.sub(" ", text or "")
    return _CMD.sub(" ", text)


def _prose_sentences(solution: str) -> list[str]:
    out = []
    for s in _SENT.split(strip_math(solution)):
        words = _WORD.findall(s)
        if len(words) >= 3:
            out.append(" ".join(words))
    return out


def summarize_extractive(doc_ids: Sequence[str], problems: Sequence[str], solutions: Sequence[str], *,
                         max_words: int = 30, n_keywords: int = 5, n_supporting: int = 2):
    """Extractive summaries with TF-IDF (no model). Returns rows (see module docstring).

    ``confidence`` is the cosine between the chosen sentence and the whole solution (TF-IDF).
    A solution without prose sentences gets ``no_core_idea = True``.
    """
    from sklearn.feature_extraction.text import TfidfVectorizer  # heavy: only the extractive summarizer needs it

    name = "extractive:tfidf"
    prose = [" ".join(_WORD.findall(strip_math(s or ""))) for s in solutions]
    vec = TfidfVectorizer(lowercase=True, token_pattern=r"(?u)\b[a-zA-Z][a-zA-Z]+\b", ngram_range=(1, 2),
                          stop_words=sorted(stop_words()), sublinear_tf=True,
                          min_df=2 if len(prose) >= 50 else 1, max_df=0.5 if len(prose) >= 50 else 1.0,
                          dtype=np.float32)
    try:
        docs = vec.fit_transform(prose)
    except ValueError:  # empty vocabulary (tiny or empty corpus)
        vec.set_params(min_df=1, max_df=1.0)
        try:
            docs = vec.fit_transform(prose)
        except ValueError:
            return [_row(d, {"no_core_idea": True, "core_idea": None, "supporting_ideas": [],
                             "keywords": [], "confidence": 0.0}, False, None, name) for d in doc_ids]
    terms = vec.get_feature_names_out()
    sents = [_prose_sentences(s or "") for s in solutions]
    owner = np.repeat(np.arange(len(sents)), [len(s) for s in sents])
    flat = [x for s in sents for x in s]
    sv = vec.transform(flat) if flat else None
    score = (np.asarray(sv.multiply(docs[owner]).sum(axis=1)).ravel() if flat else np.zeros(0))
    starts = np.concatenate([[0], np.cumsum([len(s) for s in sents])])
    rows = []
    for i, d in enumerate(doc_ids):
        row = docs.getrow(i)
        order = np.argsort(-row.data, kind="stable")
        kw = [str(terms[row.indices[k]]) for k in order[:n_keywords]]
        a, b = starts[i], starts[i + 1]
        if b == a or not kw:
            rows.append(_row(d, {"no_core_idea": True, "core_idea": None, "supporting_ideas": [],
                                 "keywords": kw, "confidence": 0.0}, False, None, name))
            continue
        sc = score[a:b]
        rank = np.argsort(-sc, kind="stable")
        core = " ".join(sents[i][rank[0]].split()[:max_words])
        sup = [" ".join(sents[i][r].split()[:12]) for r in rank[1:1 + n_supporting]]
        parsed = {"no_core_idea": False, "core_idea": core, "supporting_ideas": sup, "keywords": kw,
                  "confidence": float(np.clip(sc[rank[0]], 0.0, 1.0))}
        rows.append(_row(d, parsed, False, None, name, summary_text=" ".join([core] + kw)))
    return rows


def summaries_frame(rows):
    """The summaries table (polars) with the contract's column types."""
    return pl.DataFrame(rows, schema={
        "doc_id": pl.String, "no_core_idea": pl.Boolean, "core_idea": pl.String,
        "supporting_ideas": pl.List(pl.String), "keywords": pl.List(pl.String),
        "confidence": pl.Float64, "summary_text": pl.String, "failed": pl.Boolean,
        "failure_reason": pl.String, "summarizer": pl.String})


def summary_report(df) -> dict:
    """Counts for the manifest: problems, failures, no-core-idea, mean tokens per summary."""
    ntok = [len(summary_tokens(t)) for t in df["summary_text"].to_list()]
    return {"n": df.height, "failed": int(df["failed"].sum()), "no_core_idea": int(df["no_core_idea"].sum()),
            "empty_token_sets": int(sum(1 for n in ntok if n == 0)),
            "mean_tokens": float(np.mean(ntok)) if ntok else 0.0}
