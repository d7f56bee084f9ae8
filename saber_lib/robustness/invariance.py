"""Judges tested for invariance: the LLM paraphrase rewriter and the flip rate
of a judge's verdict under transformations that keep the mathematics of both candidates.

* :class:`LLMRewriter` - a paraphrase by an LLM backend, asked again when empty or failed; a
  paraphrase that never came keeps the text (and is not kept in the LLM cache).
* :func:`flip_verdicts` / :func:`flip_table` / :func:`flip_rates` - per transformation (the deterministic rewriters of :mod:`.rewriters`, and
  the A/B order swap, which is not a text rewrite and is handled at the pair level as
  ``"order_swap"``), how often the verdict on a (query, a, b) triple changes.
"""
from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

import polars as pl

from ..judging.outcomes import as_label
from ..llm.retry import run_with_parser
from ..llm.types import ChatRequest, Failure, ParseError
from .rewriters import Rewriter, default_rewriters


# ============================================================================ LLM paraphrase
PARAPHRASE_INSTRUCTION = (
    "Rewrite the following mathematics text in different words. Keep every mathematical fact, "
    "quantity, condition and formula exactly as it is (you may rename variables consistently), "
    "keep LaTeX for formulas, add nothing and leave nothing out. Answer with the rewritten text only.")


def parse_paraphrase(text: str) -> str:
    """A paraphrase is its answer's text, stripped; an empty answer is not one (ParseError)."""
    new = (text or "").strip()
    if not new:
        raise ParseError("empty paraphrase")
    return new


class LLMRewriter(Rewriter):
    """A paraphrase by a :mod:`saber_lib.llm` backend. Empty texts are not sent; answers go through
    ``run_with_parser`` (:func:`parse_paraphrase`): an empty answer or a failed call is asked again
    (``retries`` new calls), then keeps the original text and is counted in ``failures`` (its reason
    in ``failure_reasons``); an answer that never parsed is not kept in the LLM cache, so a rerun
    asks again."""

    name = "llm_paraphrase"

    def __init__(self, backend, instruction: str = PARAPHRASE_INSTRUCTION, temperature: float | None = 0.0,
                 max_tokens: int | None = None, name: str | None = None, retries: int = 1):
        self.backend = backend
        self.instruction = instruction
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.retries = retries
        self.failures = 0
        self.failure_reasons: list[str] = []
        if name:
            self.name = name

    def requests(self, texts: Sequence[str]) -> list:
        return [ChatRequest(messages=[{"role": "system", "content": self.instruction},
                                      {"role": "user", "content": t}],
                            temperature=self.temperature, max_tokens=self.max_tokens) for t in texts]

    def rewrite_group(self, texts):
        texts = list(texts)
        todo = [k for k, t in enumerate(texts) if t and t.strip()]
        if not todo:
            return texts
        got = run_with_parser(self.backend, self.requests([texts[k] for k in todo]), parse_paraphrase,
                              retries=self.retries, desc="LLM paraphrase")
        out = list(texts)
        for k, g in zip(todo, got):
            if isinstance(g, Failure):
                self.failures += 1
                self.failure_reasons.append(g.reason)
            else:
                out[k] = g
        return out


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
    ``solution``, e.g. ``saber_lib.judging.tournament.Doc``, rebuilt with their id kept)."""
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
    """Judge answers -> ``a | b | tie | failure`` (:func:`saber_lib.judging.outcomes.as_label`)."""
    return as_label(o)


def _judge_all(judge, items):
    if hasattr(judge, "judge_pairs"):
        return [normalize_outcome(o) for o in judge.judge_pairs(list(items))]
    return [normalize_outcome(judge(q, a, b)) for q, a, b in items]


SWAP_BACK = {"a": "b", "b": "a", "tie": "tie", "failure": "failure"}


def flip_verdicts(judge, triples: Sequence[tuple], rewriters: Mapping[str, Rewriter] | None = None,
                  order_swap: bool = True) -> pl.DataFrame:
    """A judge's verdict on every triple, original and transformed: ``item`` (index into
    ``triples``), ``transformation``, ``changed`` (the rewriter changed the triple's text; always
    true for ``order_swap``), ``base`` (the verdict on the original) and ``verdict`` (on the
    transformed triple; for ``order_swap`` the pair is shown as ``(b, a)`` and the verdict mapped
    back to the original order). One ``judge_pairs`` call per transformation. See :func:`flip_rates`."""
    rewriters = default_rewriters() if rewriters is None else dict(rewriters)
    triples = list(triples)
    base = _judge_all(judge, triples)
    plans = []
    if order_swap:
        plans.append(("order_swap", [(q, b, a) for q, a, b in triples], [True] * len(triples), True))
    for name, rw in rewriters.items():
        new = [rewrite_triple(rw, *t) for t in triples]
        changed = [n != t for n, t in zip(new, triples)]
        plans.append((name, new, changed, False))
    rows = []
    for name, items, changed, swapped in plans:
        got = _judge_all(judge, items)
        if swapped:
            got = [SWAP_BACK[o] for o in got]
        rows += [(k, name, bool(c), b0, g) for k, (c, b0, g) in enumerate(zip(changed, base, got))]
    return pl.DataFrame(rows, schema={"item": pl.Int64, "transformation": pl.String, "changed": pl.Boolean,
                                      "base": pl.String, "verdict": pl.String}, orient="row")


def flip_table(verdicts) -> pl.DataFrame:
    """:func:`flip_rates`' table from :func:`flip_verdicts`' rows (transformations in order)."""
    rows = []
    for (name,), g in verdicts.group_by(["transformation"], maintain_order=True):
        base, got, changed = g["base"].to_list(), g["verdict"].to_list(), g["changed"].to_list()
        ok = [(b0, x) for b0, x in zip(base, got) if b0 != "failure" and x != "failure"]
        okc = [(b0, x) for (b0, x), c in zip(zip(base, got), changed) if c and b0 != "failure" and x != "failure"]
        flips = sum(b0 != x for b0, x in ok)
        flips_c = sum(b0 != x for b0, x in okc)
        rows.append((name, g.height, int(sum(changed)), len(ok), flips, flips / len(ok) if ok else float("nan"),
                     flips_c, flips_c / len(okc) if okc else float("nan"),
                     sum(b0 == "failure" or x == "failure" for b0, x in zip(base, got))))
    return pl.DataFrame(rows, schema={"transformation": pl.String, "triples": pl.Int64, "changed": pl.Int64,
                                      "compared": pl.Int64, "flips": pl.Int64, "flip_rate": pl.Float64,
                                      "flips_changed": pl.Int64, "flip_rate_changed": pl.Float64,
                                      "failures": pl.Int64}, orient="row")


def flip_rates(judge, triples: Sequence[tuple], rewriters: Mapping[str, Rewriter] | None = None,
               order_swap: bool = True) -> pl.DataFrame:
    """How often a judge's verdict changes under each transformation of ``(query, a, b)`` triples.

    ``judge``: an object with ``judge_pairs(items)`` (``saber_lib.judging.judge_base.Judge``) or a callable
    ``judge(query, a, b)``. The verdict on the transformed triple is compared with the verdict on
    the original (for ``order_swap`` the pair is shown as ``(b, a)`` and the verdict mapped back);
    a flip is any change among triples where neither verdict failed (a tie against a preference
    counts). Columns: ``transformation, triples, changed`` (triples whose text the rewriter
    changed), ``compared, flips, flip_rate, flips_changed, flip_rate_changed`` (over the changed
    triples only), ``failures``."""
    return flip_table(flip_verdicts(judge, triples, rewriters, order_swap))


def shown_judgments(verdicts, ids: Sequence[tuple[str, str, str]], judge_name: str) -> pl.DataFrame:
    """The original and the order-swapped verdicts of :func:`flip_verdicts` as judgments in the
    order shown (``query_id, a, b, outcome, judge``; ``a`` shown first), for the order-effect fit
    and the agreement between judges. ``ids``: ``(query_id, a_id, b_id)`` of each triple."""
    rows = []
    base = verdicts.filter(pl.col("transformation") == verdicts["transformation"][0]) if verdicts.height else verdicts
    for k, b0 in base.select("item", "base").iter_rows():
        q, a, b = ids[k]
        rows.append((q, a, b, b0, judge_name))
    for k, v in verdicts.filter(pl.col("transformation") == "order_swap").select("item", "verdict").iter_rows():
        q, a, b = ids[k]
        rows.append((q, b, a, SWAP_BACK[v], judge_name))
    return pl.DataFrame(rows, schema={"query_id": pl.String, "a": pl.String, "b": pl.String, "outcome": pl.String,
                                      "judge": pl.String}, orient="row")
