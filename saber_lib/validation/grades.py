"""Graded reference labels: a score per (query, candidate), and how well a method orders candidates
as the grades do.

A grades file holds one grade per row: JSON Lines (one object per line) or CSV (a header row), with
the fields ``query_id``, ``doc_id`` (corpus doc ids), ``score`` (a number in [0, 100]: how close the
candidate's techniques and solution structure are to the query's), and optionally ``annotator`` and
``reason``. A malformed row, a score outside [0, 100], or one annotator grading a pair twice is one
:class:`GradesFileError` naming the file and the line. Several rows for one pair (other annotators)
are averaged.

Agreement of a method with the grades, on the queries the grades cover:

* ``pairwise_accuracy``: over the candidate pairs of one query whose grades differ by at least
  ``min_gap`` points (10 by default; equal grades never form a pair, whatever the gap, since they
  have no right order), the percent the method orders the same way; a tie of the
  method counts as not ordered (wrong), a failure leaves the pair out. Its interval resamples
  QUERIES (``metrics.resample.bootstrap_ratios`` over per-query counts).
* ``spearman``: for a method that scores each candidate on its own (ratings, a proxy's cosine, a
  selection signal, the ordinal judge), the mean over queries of the Spearman correlation of its
  scores with the grades (``scipy.stats.spearmanr``; a query where either side is constant is left
  out), with an interval from resampling queries (``bootstrap_means``).

Inter-annotator agreement: per query graded by two or more annotators, the Spearman correlation of
each pair of annotators over the candidates both graded.
"""
from __future__ import annotations

from itertools import combinations
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import polars as pl
from scipy import stats

from ..core.seeds import rng_for
from ..metrics.resample import bootstrap_means, bootstrap_ratios, percentile_interval
from . import reference as ref

FIELDS = ("query_id", "doc_id", "score")
OPTIONAL = ("annotator", "reason")
MIN_GAP = 10.0
TOP = 100.0
SAME_GRADE = 1e-9   # grades closer than this are equal (a mean of several annotators' grades in floats)
ROW_SCHEMA = {"line": pl.Int64, "query_id": pl.String, "doc_id": pl.String, "score": pl.Float64,
              "annotator": pl.String, "reason": pl.String}
PAIR_SCHEMA = {"query_id": pl.String, "a": pl.String, "b": pl.String, "grade_a": pl.Float64,
               "grade_b": pl.Float64, "label": pl.String}
AGREEMENT_SCHEMA = {"method": pl.String, "n_queries": pl.Int64, "n_pairs": pl.Int64, "pairwise_accuracy": pl.Float64,
                    "accuracy_ci_low": pl.Float64, "accuracy_ci_high": pl.Float64, "spearman": pl.Float64,
                    "spearman_ci_low": pl.Float64, "spearman_ci_high": pl.Float64}


class GradesFileError(ref.ReferenceFileError):
    """A grades file that cannot be used; the message names the file and the line."""


# ----------------------------------------------------------------------------- reading
def _check_row(obj, where: str) -> dict:
    ref.require_fields(obj, FIELDS, where, GradesFileError)
    for f in ("query_id", "doc_id"):
        if not isinstance(obj[f], str) or not obj[f].strip():
            raise GradesFileError(f"{where}: field {f} must be non-empty text")
    raw = obj["score"]
    try:
        if isinstance(raw, bool):
            raise ValueError
        score = float(raw.strip() if isinstance(raw, str) else raw)
    except (TypeError, ValueError):
        raise GradesFileError(f"{where}: score {raw!r} is not a number") from None
    if not 0.0 <= score <= TOP:       # NaN fails too
        raise GradesFileError(f"{where}: score {raw!r} is outside [0, {TOP:g}]")
    extra = {}
    for f in OPTIONAL:
        v = obj.get(f)
        if v is not None and not isinstance(v, str):
            raise GradesFileError(f"{where}: field {f} must be text")
        extra[f] = (v or "").strip()
    row = {"query_id": obj["query_id"].strip(), "doc_id": obj["doc_id"].strip(), "score": score, **extra}
    if row["query_id"] == row["doc_id"]:
        raise GradesFileError(f"{where}: a query cannot grade itself ({row['doc_id']!r})")
    return row


def read_grades(path) -> pl.DataFrame:
    """The rows of a grades file (``.csv``: CSV; anything else: JSON Lines), validated, with the
    ``line`` each came from. Raises :class:`GradesFileError` naming the file and line."""
    path = Path(path)
    try:
        rows_of = ref.file_rows(path, FIELDS, _check_row, "grades file")
    except ref.ReferenceFileError as e:
        raise GradesFileError(str(e)) from None
    rows, seen = [], {}
    try:
        for n, row in rows_of:
            key = (row["query_id"], row["doc_id"], row["annotator"])
            if key in seen:
                raise GradesFileError(f"{path}, line {n}: annotator {row['annotator']!r} graded this pair already "
                                      f"(line {seen[key]})")
            seen[key] = n
            rows.append({"line": n, **row})
    except ref.ReferenceFileError as e:
        raise GradesFileError(str(e)) from None
    if not rows:
        raise GradesFileError(f"{path}, line 1: the file holds no grade")
    return pl.DataFrame(rows, schema=ROW_SCHEMA)


def mean_grades(rows: pl.DataFrame) -> pl.DataFrame:
    """One row per (query, candidate): ``query_id``, ``doc_id``, ``grade`` (the mean of its rows),
    ``n_labels``; in first-seen order."""
    return (rows.group_by("query_id", "doc_id", maintain_order=True)
            .agg(pl.col("score").mean().alias("grade"), pl.len().alias("n_labels").cast(pl.Int64)))


def covered_queries(grades: pl.DataFrame, bench: pl.DataFrame) -> tuple[list[str], list[str]]:
    """``(covered, partial)`` query ids: a benchmark query is covered when every one of its
    candidates has a grade; partial when some, not all, have one (left out of every statistic)."""
    graded = set(grades.select("query_id", "doc_id").iter_rows())
    covered, partial = [], []
    for q, cands in bench.group_by("query_id", maintain_order=True).agg("cand_id").iter_rows():
        have = sum((q, c) in graded for c in cands)
        if have == len(cands):
            covered.append(q)
        elif have:
            partial.append(q)
    return sorted(covered), sorted(partial)


def annotator_spearman(rows: pl.DataFrame) -> pl.DataFrame:
    """Per query graded by two or more annotators, per pair of them: ``query_id``, ``annotator_1``,
    ``annotator_2``, ``n_docs`` (candidates both graded), ``spearman``."""
    out = []
    for (q,), part in rows.group_by("query_id", maintain_order=True):
        by = {a: dict(zip(p["doc_id"], p["score"])) for (a,), p in part.group_by("annotator", maintain_order=True)}
        for a1, a2 in combinations(sorted(by), 2):
            docs = sorted(set(by[a1]) & set(by[a2]))
            x, y = [by[a1][d] for d in docs], [by[a2][d] for d in docs]
            rho = (float(stats.spearmanr(x, y).statistic)
                   if len(docs) >= 3 and len(set(x)) > 1 and len(set(y)) > 1 else None)
            out.append({"query_id": q, "annotator_1": a1, "annotator_2": a2, "n_docs": len(docs), "spearman": rho})
    return pl.DataFrame(out, schema={"query_id": pl.String, "annotator_1": pl.String, "annotator_2": pl.String,
                                     "n_docs": pl.Int64, "spearman": pl.Float64})


# ----------------------------------------------------------------------------- graded pairs
def graded_pairs(grades: pl.DataFrame, queries: Sequence[str], *, min_gap: float = MIN_GAP, per_query: int = 0,
                 seed: int = 0) -> pl.DataFrame:
    """The candidate pairs of ``queries`` whose grades differ, by at least ``min_gap`` (a gap of 0:
    every pair the grades order; equal grades are never a pair, there is no right order): ``query_id``,
    ``a`` (shown first), ``b``, ``grade_a``, ``grade_b``, ``label`` (``a`` or ``b``: the better
    graded). Which one is shown first is a seeded coin flip per pair (so a judge's position bias
    cannot pass for agreement); ``per_query`` > 0 keeps that many pairs per query, drawn without
    replacement (seeded; 0 = all)."""
    rows = []
    for q in sorted(queries):
        g = grades.filter(pl.col("query_id") == q)
        docs, vals = g["doc_id"].to_list(), g["grade"].to_numpy()
        order = np.argsort(np.array(docs, dtype=object), kind="stable")
        docs, vals = [docs[i] for i in order], vals[order]
        cand = [(i, k) for i, k in combinations(range(len(docs)), 2)
                if abs(vals[i] - vals[k]) >= max(min_gap, SAME_GRADE)]
        rng = rng_for(seed, "graded pairs", q)
        if per_query and len(cand) > per_query:
            keep = np.sort(rng.choice(len(cand), size=per_query, replace=False))
            cand = [cand[j] for j in keep]
        flips = rng.random(len(cand)) < 0.5
        for (i, k), flip in zip(cand, flips):
            a, b = (k, i) if flip else (i, k)
            rows.append({"query_id": q, "a": docs[a], "b": docs[b], "grade_a": float(vals[a]), "grade_b": float(vals[b]),
                         "label": "a" if vals[a] > vals[b] else "b"})
    return pl.DataFrame(rows, schema=PAIR_SCHEMA)


def pair_verdicts_from_scores(pairs: pl.DataFrame, scores: Mapping[tuple[str, str], float]) -> list[str]:
    """Verdicts of a pointwise method on the pairs: the candidate with the higher score; equal
    scores tie; a candidate without a score makes the pair a failure."""
    out = []
    for q, a, b in pairs.select("query_id", "a", "b").iter_rows():
        sa, sb = scores.get((q, a)), scores.get((q, b))
        if sa is None or sb is None or not (np.isfinite(sa) and np.isfinite(sb)):
            out.append("failure")
        else:
            out.append("a" if sa > sb else "b" if sb > sa else "tie")
    return out


# ----------------------------------------------------------------------------- agreement
def _accuracy(verdicts: Sequence[str], pairs: pl.DataFrame, n_resamples: int, level: float, rng) -> dict:
    labels = pairs["label"].to_list()
    qids = np.asarray(pairs["query_id"].to_list(), dtype=object)
    ok = np.array([v in ("a", "b", "tie") for v in verdicts], dtype=bool)
    right = np.array([v == lab for v, lab in zip(verdicts, labels)], dtype=np.float64)
    if not ok.any():
        return {"n_pairs": 0, "pairwise_accuracy": None, "accuracy_ci_low": None, "accuracy_ci_high": None}
    uniq, inv = np.unique(qids[ok].astype(str), return_inverse=True)
    sums = np.bincount(inv, weights=right[ok], minlength=len(uniq))
    counts = np.bincount(inv, minlength=len(uniq)).astype(np.float64)
    lo, hi = percentile_interval(bootstrap_ratios(sums, counts, n_resamples, rng), level)
    return {"n_pairs": int(ok.sum()), "pairwise_accuracy": 100 * float(sums.sum() / counts.sum()),
            "accuracy_ci_low": 100 * float(lo), "accuracy_ci_high": 100 * float(hi)}


def query_spearman(scores: Mapping[tuple[str, str], float], grades: pl.DataFrame, queries: Sequence[str]) -> dict:
    """Per query the Spearman correlation of a pointwise method's scores with the grades over the
    query's graded candidates that the method scored (None where either side is constant)."""
    out = {}
    for q in sorted(queries):
        g = grades.filter(pl.col("query_id") == q)
        pts = [(scores[(q, d)], v) for d, v in g.select("doc_id", "grade").iter_rows()
               if (q, d) in scores and np.isfinite(scores[(q, d)])]
        x, y = [p[0] for p in pts], [p[1] for p in pts]
        out[q] = (float(stats.spearmanr(x, y).statistic)
                  if len(pts) >= 3 and len(set(x)) > 1 and len(set(y)) > 1 else None)
    return out


def _spearman(per_query: Mapping[str, float | None], n_resamples: int, level: float, rng) -> dict:
    vals = np.array([v for v in per_query.values() if v is not None], dtype=np.float64)
    if vals.size == 0:
        return {"spearman": None, "spearman_ci_low": None, "spearman_ci_high": None}
    lo, hi = percentile_interval(bootstrap_means(vals, vals.size, n_resamples, rng), level)
    return {"spearman": float(vals.mean()), "spearman_ci_low": float(lo), "spearman_ci_high": float(hi)}


def grade_agreement_table(verdicts: Mapping[str, Sequence[str]], pointwise: Mapping[str, Mapping], pairs: pl.DataFrame,
                          grades: pl.DataFrame, queries: Sequence[str], *, n_resamples: int, level: float,
                          seed: int) -> pl.DataFrame:
    """One row per method (:data:`AGREEMENT_SCHEMA`): ``verdicts`` maps a method to its verdict on
    each of ``pairs``; ``pointwise`` maps a method that scores candidates one at a time to
    ``{(query_id, cand_id): score}`` (its verdicts are taken from the scores unless given)."""
    rows = []
    for name in dict.fromkeys([*verdicts, *pointwise]):
        v = verdicts.get(name)
        if v is None:
            v = pair_verdicts_from_scores(pairs, pointwise[name])
        row = {"method": name, "n_queries": int(pairs.filter(pl.Series([x in ("a", "b", "tie") for x in v],
                                                                       dtype=pl.Boolean))["query_id"].n_unique())}
        row.update(_accuracy(v, pairs, n_resamples, level, rng_for(seed, "grade accuracy", name)))
        if name in pointwise:
            row.update(_spearman(query_spearman(pointwise[name], grades, queries), n_resamples, level,
                                 rng_for(seed, "grade spearman", name)))
        rows.append(row)
    return pl.DataFrame(rows, schema=AGREEMENT_SCHEMA)
