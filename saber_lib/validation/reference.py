"""Reference labels from a file, and judges scored against them with an interval over queries.

A reference file holds labelled (query, candidate 1, candidate 2) triples, one per row: JSON Lines
(one object per line) or CSV (a header row), with the fields ``query_id``, ``a`` (shown first),
``b`` (corpus doc ids), ``label`` (``a`` | ``b`` | ``tie``: which candidate is closer to the query
in mathematical ideas and techniques), ``annotator`` and ``reason`` (free text, may be empty). A
malformed row is one :class:`ReferenceFileError` naming the file and the line. A triple may carry
several labels (rows of different annotators; a row that shows the pair the other way round has its
label flipped to the triple's first-seen order); one annotator labelling a triple twice is an error.

Scoring (the paper's, :func:`saber_lib.validation.agreement.agreement_scores`): a verdict scores 1
against the same label, 0.5 when exactly one of the two is a tie, 0 otherwise. A triple with
several labels scores the MEAN of its labels' scores, so every triple weighs once. A method's
agreement is the mean over the triples it answered (failures and missing verdicts are left out),
in percent. Its interval is a percentile bootstrap that resamples QUERIES (the triples of one query
are not independent): :func:`saber_lib.metrics.resample.bootstrap_ratios` over the per-query sums
and counts of triple scores, with a stream per method from ``evaluation.seeds.rng_for``.

Inter-annotator agreement: over the triples with two or more labels, the mean over each triple's
label pairs of the same scoring (and the share of triples whose labels are all identical).
"""
from __future__ import annotations

import csv
import io
from itertools import combinations
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np
import polars as pl

from ..core import config
from ..corpus.loaders import load_source
from ..core.csvfile import CSVHeaderError, csv_header
from ..core.data import (AmbiguousJSON, NotAFile, NotUTF8, read_text, regular_file, resolve_data_dir,
                         strict_json_loads)
from ..metrics.resample import bootstrap_ratios, percentile_interval
from ..core.seeds import rng_for
from .agreement import LABELS, agreement_scores

FIELDS = ("query_id", "a", "b", "label", "annotator", "reason")
ID_FIELDS = ("query_id", "a", "b")
FLIP = {"a": "b", "b": "a", "tie": "tie"}
ROW_SCHEMA = {"line": pl.Int64, "query_id": pl.String, "a": pl.String, "b": pl.String, "label": pl.String,
              "annotator": pl.String, "reason": pl.String}
TABLE_SCHEMA = {"method": pl.String, "n_pairs": pl.Int64, "agreement": pl.Float64, "ci_low": pl.Float64,
                "ci_high": pl.Float64}


class ReferenceFileError(ValueError):
    """A reference file that cannot be used; the message names the file and the line."""


def reference_path(value, data_dir=None) -> Path | None:
    """The reference file a profile names (``judge_validation.jv_reference``): ``None`` or an empty
    value = no reference file; a relative path is inside the data directory."""
    if value is None or not str(value).strip():
        return None
    p = Path(str(value)).expanduser()
    return p if p.is_absolute() else resolve_data_dir(data_dir) / p


# ----------------------------------------------------------------------------- reading
def require_fields(obj, fields, where: str, error=None) -> None:
    """One labels-file row (``obj``, at ``where``: file and line) is an object holding every one of
    ``fields`` (not null); else ``error`` (default :class:`ReferenceFileError`) naming what is wrong."""
    error = error or ReferenceFileError
    if not isinstance(obj, dict):
        raise error(f"{where}: expected an object with {', '.join(fields)}")
    missing = [f for f in fields if f not in obj or obj[f] is None]
    if missing:
        raise error(f"{where}: missing field(s) {', '.join(missing)}")


def _check_row(obj, where: str) -> dict:
    require_fields(obj, FIELDS, where)
    bad = [f for f in FIELDS if not isinstance(obj[f], str)]
    if bad:
        raise ReferenceFileError(f"{where}: field(s) {', '.join(bad)} must be text")
    row = {f: obj[f].strip() for f in FIELDS}
    empty = [f for f in FIELDS[:-1] if not row[f]]
    if empty:
        raise ReferenceFileError(f"{where}: empty field(s) {', '.join(empty)}")
    if row["label"] not in LABELS:
        raise ReferenceFileError(f"{where}: label {row['label']!r} is not one of {', '.join(LABELS)}")
    if len({row["query_id"], row["a"], row["b"]}) < 3:
        raise ReferenceFileError(f"{where}: query_id, a and b must be three different documents")
    return row


def _jsonl_rows(text: str, path: Path, check) -> Iterable[tuple[int, dict]]:
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = strict_json_loads(line)
        except (ValueError, AmbiguousJSON) as e:
            raise ReferenceFileError(f"{path}, line {n}: not valid JSON ({e})") from None
        yield n, check(obj, f"{path}, line {n}")


def _csv_rows(text: str, path: Path, fields: Sequence[str], check) -> Iterable[tuple[int, dict]]:
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        names = csv_header(reader, f"{path}, line 1")    # the one header reader: a column named twice is an error
    except CSVHeaderError as e:
        raise ReferenceFileError(str(e)) from None
    if names is None or set(fields) - set(names):
        raise ReferenceFileError(f"{path}, line 1: the header must name {', '.join(fields)}")
    while True:
        start = reader.line_num + 1
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise ReferenceFileError(f"{path}, line {start}: {e}") from None
        if not any(c.strip() for c in cells):
            continue
        if len(cells) != len(names):
            raise ReferenceFileError(f"{path}, line {start}: {len(cells)} fields, the header has {len(names)}")
        yield start, check(dict(zip(names, cells)), f"{path}, line {start}")


def file_rows(path, fields: Sequence[str], check, what: str = "reference file") -> Iterable[tuple[int, dict]]:
    """``(line, row)`` of a labels file (``.csv``: CSV with a header naming ``fields``; anything
    else: JSON Lines), each row passed through ``check(obj, where)``. The file is read (and a
    missing or non-UTF-8 file reported) at once; rows are checked as they are consumed."""
    path = Path(path)
    try:
        regular_file(path, what)
    except NotAFile as e:   # a folder, a FIFO (never opened), ...: named as what it is
        raise ReferenceFileError(str(e)) from None
    except FileNotFoundError:
        raise ReferenceFileError(f"{path}: {what} not found") from None
    try:
        text = read_text(path)
    except NotUTF8 as e:
        raise ReferenceFileError(str(e)) from None
    if path.suffix.lower() == ".csv":
        return _csv_rows(text, path, fields, check)
    return _jsonl_rows(text, path, check)


def read_reference(path) -> pl.DataFrame:
    """The rows of a reference file (``.csv``: CSV; anything else: JSON Lines), validated, with the
    ``line`` each came from. Raises :class:`ReferenceFileError` naming the file and line."""
    path = Path(path)
    rows, seen = [], {}
    for n, row in file_rows(path, FIELDS, _check_row):
        key = (row["query_id"], *sorted((row["a"], row["b"])), row["annotator"])
        if key in seen:
            raise ReferenceFileError(f"{path}, line {n}: annotator {row['annotator']!r} labelled this triple "
                                     f"already (line {seen[key]})")
        seen[key] = n
        rows.append({"line": n, **row})
    if not rows:
        raise ReferenceFileError(f"{path}, line 1: the file holds no labelled triple")
    return pl.DataFrame(rows, schema=ROW_SCHEMA)


def source_ids(data_dir, source: str) -> set[str]:
    """Every doc id a corpus source holds (read in full, before deduplication)."""
    return {r["doc_id"] for r in load_source(source, data_dir, 0, allow_empty=True).records}


def split_by_corpus(rows: pl.DataFrame, corpus_ids: Iterable[str], path,
                    ids_of_source: Callable[[str], set[str]], fields: Sequence[str] = ID_FIELDS
                    ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``(kept, skipped)`` rows: kept when every id of ``fields`` (the query and both candidates of a
    triple, by default) is in the run's corpus.
    An id outside the corpus must still be in a source (``<source>:<id>`` with a known source that
    holds it, ``ids_of_source(source)``, asked only for such ids): else one
    :class:`ReferenceFileError` naming the file and the line."""
    corpus = set(corpus_ids)
    cache: dict[str, set[str]] = {}
    keep = []
    for row in rows.iter_rows(named=True):
        outside = [row[f] for f in fields if row[f] not in corpus]
        for doc in outside:
            src = doc.split(":", 1)[0]
            if ":" not in doc or src not in config.SOURCES:
                raise ReferenceFileError(f"{path}, line {row['line']}: {doc!r} is in no corpus source "
                                         f"(ids are <source>:<id>, sources {', '.join(config.SOURCES)})")
            if src not in cache:
                cache[src] = ids_of_source(src)
            if doc not in cache[src]:
                raise ReferenceFileError(f"{path}, line {row['line']}: {doc!r} is in no corpus source "
                                         f"({src} has no such id)")
        keep.append(not outside)
    mask = pl.Series(keep, dtype=pl.Boolean)
    return rows.filter(mask), rows.filter(~mask)


def triples(rows: pl.DataFrame) -> pl.DataFrame:
    """One row per labelled triple, in first-seen order: ``query_id``, ``a``, ``b`` (the first row's
    display order), ``labels`` (every row's label, oriented to that order), ``annotators``, ``lines``."""
    order: dict[tuple, dict] = {}
    for r in rows.iter_rows(named=True):
        key = (r["query_id"], *sorted((r["a"], r["b"])))
        t = order.setdefault(key, {"query_id": r["query_id"], "a": r["a"], "b": r["b"], "labels": [],
                                   "annotators": [], "lines": []})
        t["labels"].append(r["label"] if r["a"] == t["a"] else FLIP[r["label"]])
        t["annotators"].append(r["annotator"])
        t["lines"].append(r["line"])
    return pl.DataFrame(list(order.values()), schema={"query_id": pl.String, "a": pl.String, "b": pl.String,
                                                      "labels": pl.List(pl.String), "annotators": pl.List(pl.String),
                                                      "lines": pl.List(pl.Int64)})


# ----------------------------------------------------------------------------- scoring
def triple_scores(verdicts: Sequence, labels: Sequence[Sequence[str]]) -> np.ndarray:
    """Per triple: the mean of the paper's score of its verdict against each of its labels; NaN
    where the verdict is missing (``None``) or a failure."""
    if len(verdicts) != len(labels):
        raise ValueError(f"{len(verdicts)} verdicts for {len(labels)} triples")
    out = np.full(len(verdicts), np.nan)
    for k, (v, labs) in enumerate(zip(verdicts, labels)):
        s = agreement_scores([v] * len(labs), list(labs))
        if len(labs) and np.isfinite(s).all():
            out[k] = float(s.mean())
    return out


def query_interval(scores, query_ids: Sequence[str], n_resamples: int, level: float,
                   rng: np.random.Generator) -> tuple[float, float, float, int]:
    """``(mean, low, high, n)`` of the scored triples (NaN scores left out): the pooled mean and
    its percentile interval from resampling the queries that hold them (``bootstrap_ratios``)."""
    s = np.asarray(scores, dtype=np.float64)
    ok = np.isfinite(s)
    if not ok.any():
        return float("nan"), float("nan"), float("nan"), 0
    q = np.asarray(query_ids, dtype=object)[ok]
    uniq, inv = np.unique(q.astype(str), return_inverse=True)
    sums = np.bincount(inv, weights=s[ok], minlength=len(uniq))
    counts = np.bincount(inv, minlength=len(uniq)).astype(np.float64)
    lo, hi = percentile_interval(bootstrap_ratios(sums, counts, n_resamples, rng), level)
    return float(sums.sum() / counts.sum()), float(lo), float(hi), int(ok.sum())


def reference_agreement_table(methods: Mapping[str, Sequence], trip: pl.DataFrame, *, n_resamples: int, level: float,
                    seed: int) -> pl.DataFrame:
    """``method, n_pairs, agreement, ci_low, ci_high`` (percent) of every method's verdicts on the
    triples (``methods``: name -> one verdict per triple of ``trip``)."""
    labels, qids = trip["labels"].to_list(), trip["query_id"].to_list()
    rows = []
    for name, verdicts in methods.items():
        m, lo, hi, n = query_interval(triple_scores(verdicts, labels), qids, n_resamples, level,
                                      rng_for(seed, "reference agreement", name))
        rows.append({"method": name, "n_pairs": n, "agreement": 100 * m if n else None,
                     "ci_low": 100 * lo if n else None, "ci_high": 100 * hi if n else None})
    return pl.DataFrame(rows, schema=TABLE_SCHEMA)


def by_gap_table(methods: Mapping[str, Sequence], trip: pl.DataFrame, gaps: Sequence, deltas: Sequence[int]
                 ) -> pl.DataFrame:
    """``method, delta, n_pairs, agreement`` (percent): agreement on the triples whose rank gap in
    the benchmark's ranking is at least ``delta`` (``gaps``: one per triple, None where either
    candidate is unranked)."""
    g = np.array([np.nan if x is None else float(x) for x in gaps])
    labels = trip["labels"].to_list()
    rows = []
    for name, verdicts in methods.items():
        s = triple_scores(verdicts, labels)
        for d in deltas:
            m = np.isfinite(s) & np.isfinite(g) & (g >= d)
            rows.append({"method": name, "delta": int(d), "n_pairs": int(m.sum()),
                         "agreement": 100 * float(s[m].mean()) if m.any() else None})
    return pl.DataFrame(rows, schema={"method": pl.String, "delta": pl.Int64, "n_pairs": pl.Int64,
                                      "agreement": pl.Float64})


def inter_annotator_table(trip: pl.DataFrame, *, n_resamples: int, level: float, seed: int) -> pl.DataFrame:
    """Agreement between the labels of triples labelled more than once: ``n_pairs`` (such triples),
    ``agreement`` (percent; per triple the mean over its label pairs), ``ci_low``, ``ci_high``
    (queries resampled), ``identical`` (percent of those triples whose labels all agree)."""
    multi = trip.filter(pl.col("labels").list.len() >= 2)
    scores = [float(np.mean([agreement_scores([x], [y])[0] for x, y in combinations(labs, 2)]))
              for labs in multi["labels"].to_list()]
    m, lo, hi, n = query_interval(scores, multi["query_id"].to_list(), n_resamples, level,
                                  rng_for(seed, "reference inter-annotator")) if scores else (0, 0, 0, 0)
    same = [len(set(labs)) == 1 for labs in multi["labels"].to_list()]
    return pl.DataFrame([{"n_pairs": n, "agreement": 100 * m if n else None, "ci_low": 100 * lo if n else None,
                          "ci_high": 100 * hi if n else None,
                          "identical": 100 * float(np.mean(same)) if same else None}],
                        schema={"n_pairs": pl.Int64, "agreement": pl.Float64, "ci_low": pl.Float64,
                                "ci_high": pl.Float64, "identical": pl.Float64})


def verdict_stats(verdicts: Sequence) -> dict:
    """``answered`` (verdicts that are a, b or tie), ``failures``, ``ties`` (share of the answered)
    and ``first_share`` (share of the decided verdicts that chose the candidate shown first)."""
    v = list(verdicts)
    answered = [x for x in v if x in LABELS]
    decided = [x for x in answered if x != "tie"]
    return {"answered": len(answered), "failures": len(v) - len(answered),
            "ties": (len(answered) - len(decided)) / len(answered) if answered else None,
            "first_share": sum(x == "a" for x in decided) / len(decided) if decided else None}
