"""SABER-Math as its authors released it: read, validate, and convert to what ``evaluate`` reads.

The release (the authors' loading code: Hugging Face datasets ``INSAIT-Institute/SaberMath-queries``
and ``INSAIT-Institute/SaberMath-documents``, split ``train``) is two sets:

* queries: ``id``, ``problem``, ``solution``, ``domains`` (list of domain names), ``candidates``
  (``n`` integer **row indices** into the documents set) and ``relevance_scores`` (``n`` numbers
  in [0, 5], aligned with ``candidates``); ``n`` = 150 in the release.
* documents: ``id``, ``problem``, ``solution``.

A benchmark folder holds each set as ``<set>.parquet``, ``<set>.jsonl`` or ``<set>/`` (a folder
written by ``datasets``' ``save_to_disk``; needs the optional ``datasets`` package). Every row is
validated; the first bad row raises :class:`ReleasedError` naming the file, the row (0-based, the
index ``candidates`` use) and the field.

:func:`to_artifacts` gives the tables the ``released`` stage writes (ids are strings; the query ids
are the released query ids, the document ids the documents' ids; the two id spaces are kept in
separate tables, so a query and a document may share an id):

* ``queries.parquet``: ``query_id``, ``problem``, ``solution``, ``domains``
* ``documents.parquet``: ``doc_id``, ``problem``, ``solution``
* ``benchmark.parquet``: ``query_id``, ``query_domains``, ``cand_id``, ``position`` (as select's)
* ``ratings.parquet``: ``query_id``, ``cand_id``, ``position``, ``rating`` (the released score)
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from ..core.config import DOMAINS

SETS = ("queries", "documents")
QUERY_FIELDS = ("id", "problem", "solution", "domains", "candidates", "relevance_scores")
DOCUMENT_FIELDS = ("id", "problem", "solution")
MAX_SCORE = 5.0
HF_DATASETS = {"queries": "INSAIT-Institute/SaberMath-queries",
               "documents": "INSAIT-Institute/SaberMath-documents"}


class ReleasedError(ValueError):
    """A released set that cannot be used; the message names the file, the row and the field."""


@dataclass
class Released:
    queries: list[dict]
    documents: list[dict]
    files: dict[str, Path]


# ----------------------------------------------------------------------------- reading
def find_set(root, name: str) -> Path:
    """The file (or ``save_to_disk`` folder) of set ``name`` in a benchmark folder."""
    root = Path(root)
    if not root.is_dir():
        raise ReleasedError(f"{root}: benchmark folder not found (released.benchmark_dir)")
    found = [p for p in (root / f"{name}.parquet", root / f"{name}.jsonl", root / name) if p.exists()]
    if not found:
        raise ReleasedError(f"{root}: no {name}.parquet, {name}.jsonl or {name}/ (save_to_disk) folder; "
                            f"see the README, 'The released benchmark'")
    if len(found) > 1:
        raise ReleasedError(f"{root}: {name} is given twice ({', '.join(p.name for p in found)}); keep one")
    return found[0]


def read_rows(path) -> list[dict]:
    """The rows of one set as plain Python dicts (parquet, JSON lines or a save_to_disk folder)."""
    path = Path(path)
    if path.is_dir():
        try:
            import datasets  # optional (the `released` extra): only a save_to_disk folder needs it
        except ImportError:
            raise ReleasedError(f"{path}: a save_to_disk folder needs the 'datasets' package "
                                f"(pip install -e '.[released]'), or convert it to {path.name}.parquet") from None
        ds = datasets.load_from_disk(str(path))
        if isinstance(ds, datasets.DatasetDict):
            if len(ds) != 1 and "train" not in ds:
                raise ReleasedError(f"{path}: splits {list(ds)}; expected one split or 'train'")
            ds = ds["train"] if "train" in ds else next(iter(ds.values()))
        return ds.to_list()
    if path.suffix == ".parquet":
        try:
            return pl.read_parquet(path).to_dicts()
        except Exception as e:  # polars raises several error types for a broken file
            raise ReleasedError(f"{path}: not a readable Parquet file ({e})") from None
    rows = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            if not line.strip():
                raise ReleasedError(f"{path}: row {i} (line {i + 1}): empty line")
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ReleasedError(f"{path}: row {i} (line {i + 1}): not valid JSON ({e.msg})") from None
            if not isinstance(row, dict):
                raise ReleasedError(f"{path}: row {i} (line {i + 1}): not a JSON object")
            rows.append(row)
    return rows


# ----------------------------------------------------------------------------- validation
def _id(v, fail) -> str:
    if isinstance(v, bool) or v is None:
        fail("id", f"{v!r} is not an id")
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    if isinstance(v, str) and v.strip():
        return v.strip()
    fail("id", f"{v!r} is not an id (a non-empty string or an integer)")


def _text(row, key, fail) -> str:
    v = row.get(key)
    if not isinstance(v, str) or not v.strip():
        fail(key, f"expected a non-empty text, got {v!r}"[:200])
    return v


def validate(queries: list[dict], documents: list[dict], files: dict[str, Path],
             n_candidates: int = 150) -> None:
    """Raise :class:`ReleasedError` at the first bad row (file, row, field); see the module docstring."""
    def failer(name, i):
        def fail(fld, msg):
            raise ReleasedError(f"{files[name]}: row {i}: field '{fld}': {msg}")
        return fail

    for name, rows, fields in (("documents", documents, DOCUMENT_FIELDS), ("queries", queries, QUERY_FIELDS)):
        if not rows:
            raise ReleasedError(f"{files[name]}: no rows")
        seen: dict[str, int] = {}
        for i, row in enumerate(rows):
            fail = failer(name, i)
            for fld in fields:
                if fld not in row:
                    fail(fld, "missing")
            rid = _id(row["id"], fail)
            if rid in seen:
                fail("id", f"{rid!r} is also the id of row {seen[rid]}")
            seen[rid] = i
            _text(row, "problem", fail)
            _text(row, "solution", fail)
    n_docs = len(documents)
    for i, row in enumerate(queries):
        fail = failer("queries", i)
        doms = row["domains"]
        if not isinstance(doms, (list, tuple)) or not doms:
            fail("domains", f"expected a non-empty list of domain names, got {doms!r}")
        for d in doms:
            if d not in DOMAINS:
                fail("domains", f"{d!r} is not one of {list(DOMAINS)}")
        cands, rel = row["candidates"], row["relevance_scores"]
        if not isinstance(cands, (list, tuple)) or len(cands) != n_candidates:
            fail("candidates", f"expected a list of {n_candidates} row indices "
                 f"(released.released_candidates), got {len(cands) if isinstance(cands, (list, tuple)) else repr(cands)}")
        for j, c in enumerate(cands):
            if isinstance(c, bool) or not isinstance(c, int):
                fail("candidates", f"entry {j}: {c!r} is not an integer row index")
            if not 0 <= c < n_docs:
                fail("candidates", f"entry {j}: row index {c} is outside the documents set (0..{n_docs - 1})")
        if len(set(cands)) != len(cands):
            dup = next(c for c in cands if list(cands).count(c) > 1)
            fail("candidates", f"row index {dup} is listed twice")
        if not isinstance(rel, (list, tuple)) or len(rel) != len(cands):
            fail("relevance_scores", f"expected {len(cands)} scores (one per candidate), got "
                 f"{len(rel) if isinstance(rel, (list, tuple)) else repr(rel)}")
        for j, r in enumerate(rel):
            if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r):
                fail("relevance_scores", f"entry {j}: {r!r} is not a finite number")
            if not 0.0 <= r <= MAX_SCORE:
                fail("relevance_scores", f"entry {j}: {r} is outside [0, {MAX_SCORE:g}]")


def read_released(root, n_candidates: int = 150) -> Released:
    """Read and validate a benchmark folder."""
    files = {name: find_set(root, name) for name in SETS}
    rows = {name: read_rows(files[name]) for name in SETS}
    validate(rows["queries"], rows["documents"], files, n_candidates)
    return Released(rows["queries"], rows["documents"], files)


# ----------------------------------------------------------------------------- artifacts
def to_artifacts(rel: Released) -> dict[str, pl.DataFrame]:
    """The four tables of the module docstring, sorted by id (byte-identical for the same input)."""
    def sid(v):
        return str(int(v)) if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v).strip()

    doc_ids = [sid(d["id"]) for d in rel.documents]
    documents = pl.DataFrame({"doc_id": doc_ids, "problem": [d["problem"] for d in rel.documents],
                              "solution": [d["solution"] for d in rel.documents]},
                             schema={"doc_id": pl.Utf8, "problem": pl.Utf8, "solution": pl.Utf8})
    q_rows, b_rows = [], []
    for q in rel.queries:
        qid = sid(q["id"])
        doms = [str(d) for d in q["domains"]]
        q_rows.append((qid, q["problem"], q["solution"], doms))
        for pos, (c, r) in enumerate(zip(q["candidates"], q["relevance_scores"])):
            b_rows.append((qid, doms, doc_ids[int(c)], pos, float(r)))
    queries = pl.DataFrame(q_rows, schema={"query_id": pl.Utf8, "problem": pl.Utf8, "solution": pl.Utf8,
                                           "domains": pl.List(pl.Utf8)}, orient="row")
    long = pl.DataFrame(b_rows, schema={"query_id": pl.Utf8, "query_domains": pl.List(pl.Utf8),
                                        "cand_id": pl.Utf8, "position": pl.Int64, "rating": pl.Float64},
                        orient="row").sort("query_id", "position")
    return {"queries": queries.sort("query_id"), "documents": documents.sort("doc_id"),
            "benchmark": long.select("query_id", "query_domains", "cand_id", "position"),
            "ratings": long.select("query_id", "cand_id", "position", "rating")}


def write_artifacts(rel: Released, out_dir) -> dict[str, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, df in to_artifacts(rel).items():
        paths[name] = out / f"{name}.parquet"
        df.write_parquet(paths[name])
    return paths
