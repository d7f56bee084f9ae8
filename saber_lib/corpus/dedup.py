"""Duplicate removal: exact duplicates within a source, then near duplicates across sources.

1. Exact, within a source: two records of one source whose problems have the same
   :func:`exact_key` (Unicode NFKC, lower case, whitespace runs collapsed) are one problem; the
   first in file order is kept.
2. Near, across sources (MinHash LSH, as the paper's datatrove pipeline). Only the problem
   statement is shingled (restatements come with other solutions), after :func:`dedup_text`
   removes source boilerplate. A problem is the sequence t_1..t_n of its :func:`tokens`
   (lower-cased words, numbers and arithmetic/relation symbols; LaTeX delimiters and layout
   commands dropped; digits kept, so that one template with other numbers gives other shingles).
   Its shingle set is

       S(d) = { (t_i, ..., t_{i+k-1}) : 1 <= i <= n-k+1 }   (k = shingle_size; S = {(t_1..t_n)} if n < k)

   and the Jaccard similarity J(a, b) = |S(a) & S(b)| / |S(a) | S(b)| is estimated by the fraction of
   equal MinHash values over num_perm = b * r seeded permutations. LSH with b bands of r rows makes
   a pair a candidate with probability 1 - (1 - J^r)^b (threshold about (1/b)^(1/r); 14 x 8 gives
   ~0.72). A candidate counts as a duplicate when the estimated J >= ``near_dup_threshold`` and,
   with ``number_check``, the numbers of one problem are a sub-multiset of the other's
   (:func:`numbers_compatible`): a restatement may add or drop numbers (answer choices, "find the
   remainder mod 1000") but a problem with other numbers in the same template is another problem.
   Sources are visited in priority order (the order of ``corpus.sources``); a record is removed
   when it is a duplicate of a record already kept from another, earlier source, and the kept
   record with the highest estimated J (then the earliest) is logged as the one it duplicates.
   Because only kept records are matched, every removal names a surviving record (no chains).
"""
from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .schema import RULE_EXACT, RULE_NEAR

if TYPE_CHECKING:   # imported where a corpus is deduplicated (heavy: SciPy)
    from datasketch import MinHash

_WS = re.compile(r"\s+")
# LaTeX commands that only change layout; dropped before tokenizing.
_LAYOUT = re.compile(r"\\(?:left|right|bigl|bigr|Bigl|Bigr|big|Big|displaystyle|textstyle|text|mathrm|"
                     r"textbf|mathbf|textit|emph|mbox|operatorname|quad|qquad|[,;:! ])(?![a-zA-Z])")
# Spellings of one command that differ between sources.
_SYNONYMS = [(re.compile(r"\\[dt]frac(?![a-zA-Z])"), r"\\frac"), (re.compile(r"\\leq(?![a-zA-Z])"), r"\\le"),
             (re.compile(r"\\geq(?![a-zA-Z])"), r"\\ge"), (re.compile(r"\\neq(?![a-zA-Z])"), r"\\ne"),
             (re.compile(r"\\cdot(?![a-zA-Z])"), "*"), (re.compile(r"\\times(?![a-zA-Z])"), "*")]
_TOKEN = re.compile(r"[a-z]+|[0-9]+|[+\-*/=<>!|^]")
SHINGLE_BLOCK = 20_000   # records whose shingle sets are built and hashed together (near_cross_source)
# AoPS wiki links "[[root]]s", "[[Set|sets]]": keep the shown word.
_WIKI_LINK = re.compile(r"\[\[(?:[^\]|]*\|)?([^\]]*)\]\]")
# Layout HTML in AoPS-derived statements ("<center>", '<div style="...">').
_HTML_TAG = re.compile(r"</?(?:div|center|span|p|br|font|table|tr|td)(?:\s[^<>]*)?/?>", re.I)
# Forum BBCode ("[i]short[/i]", "[list][*] ...").
_BBCODE = re.compile(r"\[/?(?:i|b|u|list|\*|center|quote)\]", re.I)
# miniF2F turns a question into a statement by appending "Show that it is <answer>."
_MINIF2F_ANSWER = re.compile(r"\s*Show that it is\b(?:(?!Show that it is).)*\Z", re.S)


def dedup_text(record: dict) -> str:
    """The problem text that is shingled: the statement without source boilerplate.

    AoPS wiki link markup ``[[x|y]]`` -> ``y``, layout HTML tags (``<center>``, ``<div ...>``)
    and forum BBCode (``[i]``, ``[list]``, ``[*]``) everywhere; for miniF2F the final
    "Show that it is <answer>." that its authors appended to questions is dropped, so the item
    matches the question it restates (the answer is not part of the other sources' statements).
    """
    text = _WIKI_LINK.sub(r"\1", record["problem"])
    text = _BBCODE.sub(" ", _HTML_TAG.sub(" ", text))
    if record.get("source") == "minif2f":
        text = _MINIF2F_ANSWER.sub("", text)
    return text


def numbers_compatible(toks_a: list[str], toks_b: list[str]) -> bool:
    """True when the multiset of numbers in one token list is contained in the other's.

    N(a) <= N(b) or N(b) <= N(a) (as multisets of digit tokens). Template variants that swap
    numbers (5 red and 3 blue vs 7 red and 4 blue) fail; added answer choices or a dropped
    "mod 1000" pass.
    """
    na = Counter(t for t in toks_a if t.isdigit())
    nb = Counter(t for t in toks_b if t.isdigit())
    return not (na - nb) or not (nb - na)


def exact_key(text: str) -> str:
    """Key for exact duplicates: NFKC, lower case, whitespace runs collapsed to one space, stripped."""
    return _WS.sub(" ", unicodedata.normalize("NFKC", text).lower()).strip()


def tokens(text: str) -> list[str]:
    """Words, numbers and the symbols + - * / = < > ! | ^ of a problem, lower case.

    LaTeX delimiters ($, \\(, \\[, braces), punctuation and layout commands (\\left, \\text, ...)
    vanish; \\dfrac/\\tfrac -> frac, \\leq -> le, \\cdot and \\times -> *. Digits are kept.
    """
    t = unicodedata.normalize("NFKC", text)
    t = _LAYOUT.sub(" ", t)
    for pat, rep in _SYNONYMS:
        t = pat.sub(rep, t)
    return _TOKEN.findall(t.lower())


def shingles(toks: list[str], k: int) -> set[bytes]:
    """Word k-gram shingles S(d) (the whole sequence when shorter than k), as UTF-8 bytes."""
    if not toks:
        return set()
    if len(toks) < k:
        return {" ".join(toks).encode()}
    return {" ".join(toks[i:i + k]).encode() for i in range(len(toks) - k + 1)}


def _minhash_chunk(shared, chunk):
    num_perm, seed = shared
    from datasketch import MinHash  # heavy (SciPy): imported when a corpus is deduplicated
    return [m.hashvalues for m in MinHash.bulk([list(s) for s in chunk], num_perm=num_perm, seed=seed)]


def minhashes(shingle_sets: list[set[bytes]], num_perm: int, seed: int, executor=None,
              chunk: int = 2000) -> list[MinHash]:
    """One MinHash per shingle set, ``num_perm`` seeded permutations (``MinHash.bulk``).

    A MinHash value is a minimum over the set, so it depends only on the set and the seed: with an
    ``executor`` (:mod:`saber_lib.core.parallel`) chunks of ``chunk`` sets are hashed in parallel and the
    signatures are the same, bit for bit.
    """
    from datasketch import MinHash  # heavy (SciPy): imported when a corpus is deduplicated
    if executor is None:
        return MinHash.bulk([list(s) for s in shingle_sets], num_perm=num_perm, seed=seed)
    tasks = [shingle_sets[i:i + chunk] for i in range(0, len(shingle_sets), chunk)]
    values = [h for part in executor.map(_minhash_chunk, tasks, (num_perm, seed)) for h in part]
    like = MinHash(num_perm=num_perm, seed=seed)   # the permutations and scheme MinHash.bulk uses
    return [MinHash(num_perm=num_perm, seed=seed, hashvalues=h, permutations=like.permutations,
                    scheme=like.scheme) for h in values]


def estimated_jaccard(sig_a: np.ndarray, sig_b: np.ndarray) -> float:
    """Fraction of equal MinHash values: an unbiased estimate of J(a, b)."""
    return float(np.count_nonzero(sig_a == sig_b)) / sig_a.shape[-1]


@dataclass
class DedupResult:
    keep: list[bool]       # per input record
    log: list[dict]        # rows of schema.DEDUP_LOG_SCHEMA
    candidate_pairs: int = 0   # LSH candidate pairs checked (near rule)
    below_threshold: int = 0   # of those, pairs whose estimated Jaccard was below the threshold
    numbers_differ: int = 0    # of those, pairs above the threshold rejected by the number check


def _entry(removed: dict, kept: dict, rule: str, similarity: float) -> dict:
    """One dedup-log row; the removed record's text is kept so that nothing disappears silently."""
    return {"removed_id": removed["doc_id"], "removed_source": removed["source"],
            "kept_id": kept["doc_id"], "kept_source": kept["source"], "rule": rule,
            "similarity": float(similarity), "removed_problem": removed["problem"],
            "removed_solution": removed.get("solution")}


def exact_within_source(records: list[dict]) -> DedupResult:
    """Rule 1: drop a record whose problem's :func:`exact_key` was seen before in the same source."""
    seen: dict[tuple[str, str], dict] = {}
    keep, log = [], []
    for r in records:
        key = (r["source"], exact_key(r["problem"]))
        first = seen.get(key)
        if first is None:
            seen[key] = r
            keep.append(True)
        else:
            keep.append(False)
            log.append(_entry(r, first, RULE_EXACT, 1.0))
    return DedupResult(keep, log)


def near_cross_source(records: list[dict], priority: list[str], shingle_size: int, bands: int,
                      rows: int, seed: int, threshold: float, number_check: bool = True,
                      executor=None) -> DedupResult:
    """Rule 2: MinHash-LSH near duplicates across sources, kept by source priority (module doc).

    ``records`` are visited source by source in ``priority`` order (file order within a source).
    Records without any token are never matched.
    """
    num_perm = bands * rows
    rank = {s: i for i, s in enumerate(priority)}
    order = sorted(range(len(records)), key=lambda i: (rank[records[i]["source"]], i))
    rank_pos = {i: p for p, i in enumerate(order)}
    toks = [tokens(dedup_text(r)) for r in records]
    # shingle sets a block at a time, dropped once hashed: only one block's sets are ever in memory
    # (all of them at once took most of the peak memory of a large corpus); same signatures
    nonempty: list[bool] = []
    mhs: list[MinHash] = []
    for start in range(0, len(toks), SHINGLE_BLOCK):
        sets = [shingles(t, shingle_size) for t in toks[start:start + SHINGLE_BLOCK]]
        nonempty += [bool(x) for x in sets]
        mhs += minhashes(sets, num_perm, seed, executor)
        del sets
    sig = np.vstack([m.hashvalues for m in mhs]) if mhs else np.zeros((0, num_perm), np.uint64)
    from datasketch import MinHashLSH  # heavy (SciPy): imported when a corpus is deduplicated
    lsh = MinHashLSH(num_perm=num_perm, params=(bands, rows))
    keep = [True] * len(records)
    log: list[dict] = []
    n_cand = n_below = n_numbers = 0
    pos = 0
    while pos < len(order):
        src = records[order[pos]]["source"]
        end = pos
        while end < len(order) and records[order[end]]["source"] == src:
            end += 1
        block = order[pos:end]
        # query this source against the kept records of earlier sources, then add its survivors
        for i in block:
            if not nonempty[i]:
                continue
            best = None
            for j in lsh.query(mhs[i]):
                sim = estimated_jaccard(sig[i], sig[j])
                n_cand += 1
                if sim < threshold:
                    n_below += 1
                    continue
                if number_check and not numbers_compatible(toks[i], toks[j]):
                    n_numbers += 1
                    continue
                if (best is None or (sim, -rank_pos[j]) > (best[0], -rank_pos[best[1]])):
                    best = (sim, j)
            if best is not None:
                keep[i] = False
                kept = records[best[1]]
                log.append(_entry(records[i], kept, RULE_NEAR, best[0]))
        with lsh.insertion_session() as session:
            for i in block:
                if keep[i] and nonempty[i]:
                    session.insert(i, mhs[i], check_duplication=False)
        pos = end
    return DedupResult(keep, log, n_cand, n_below, n_numbers)
