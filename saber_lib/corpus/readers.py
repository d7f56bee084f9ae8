"""Reading source files into raw records, strictly: JSON lines (plain or zipped), JSON arrays and CSV.

What the loaders of ``loaders.py`` share: the result of a load (:class:`SourceLoad`), the errors,
field helpers, the record builder, the readers (each yields one raw record per line, row or entry,
with where it was found) and the driver that converts raw records and quarantines what fails. The
reading rules are described in the docstring of ``loaders.py``.
"""
from __future__ import annotations

import csv
import io
import json
import zipfile
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

from ..core.csvfile import CSVHeaderError, csv_header
from ..core.data import NotUTF8, data_file, decode_utf8, read_text
from .schema import LICENSES, source_domain


# --------------------------------------------------------------------------- results and errors
@dataclass
class SourceLoad:
    source: str
    records: list[dict] = field(default_factory=list)
    quarantine: list[dict] = field(default_factory=list)
    raw: int = 0
    notes: dict[str, Any] = field(default_factory=dict)


class Reject(Exception):
    """A raw record that cannot be used; the message is the quarantine reason."""


class SourceFileError(ValueError):
    """A source file that cannot be read at all (not a per-record problem)."""


@dataclass(frozen=True)
class RawRecord:
    file: str            # relative path (or package resource) for the quarantine table
    where: str           # "line 12", "row 3 (line 7)", "index 5", "problem P_x"
    value: Any = None    # the decoded object
    bad: str | None = None  # reason when the raw record could not even be decoded


@dataclass
class ReadOptions:
    """Per-load reading options, and what the readers noticed (empty files) for the notes."""

    allow_empty: bool = False
    empty_files: list[str] = field(default_factory=list)

    def notes(self) -> dict[str, Any]:
        return {"empty_files": list(self.empty_files)} if self.empty_files else {}


# --------------------------------------------------------------------------- field helpers
def get_field(obj, key: str):
    if not isinstance(obj, dict):
        raise Reject(f"record is not an object ({type(obj).__name__})")
    if key not in obj or obj[key] is None:
        raise Reject(f"missing field {key!r}")
    return obj[key]


def text_field(obj, key: str) -> str:
    v = get_field(obj, key)
    if not isinstance(v, str):
        raise Reject(f"field {key!r} is not text ({type(v).__name__})")
    return v


def ident_field(obj, key: str) -> str:
    v = get_field(obj, key)
    if isinstance(v, bool) or not isinstance(v, (str, int)):
        raise Reject(f"field {key!r} is not an id ({type(v).__name__})")
    v = str(v).strip()
    if not v:
        raise Reject(f"empty field {key!r}")
    return v


def optional_text(obj, key: str) -> str | None:
    v = obj.get(key) if isinstance(obj, dict) else None
    if v is None:
        return None
    v = str(v).strip()
    return v or None


def make_record(source: str, source_id: str, problem: str, solutions: list[str],
                subject: str | None = None, level: str | None = None, license: str | None = None) -> dict:
    """Build one normalized record; raises :class:`Reject` for an empty problem or solution.
    ``license``: the source's licence (default: the built-in sources' table; a plugin's source
    without one is recorded as not stated)."""
    problem = problem.strip()
    sols = [s.strip() for s in solutions if isinstance(s, str) and s.strip()]
    if not problem:
        raise Reject("empty problem")
    if not sols:
        raise Reject("empty solution")
    subject = subject.strip() if isinstance(subject, str) and subject.strip() else None
    return {
        "doc_id": f"{source}:{source_id}",
        "source": source,
        "source_id": source_id,
        "problem": problem,
        "solution": sols[0],
        "source_subject": subject,
        "source_level": level,
        "license": license if license is not None else LICENSES.get(source, "not stated (a user's source)"),
        "extra_solutions": sols[1:],
        "source_domain": source_domain(source, subject),
    }


# --------------------------------------------------------------------------- raw readers
def _lines(data: bytes, rel: str) -> Iterator[RawRecord]:
    """Non-blank lines of a JSON-lines payload, decoded as every text file is (:func:`decode_utf8`: a
    byte-order mark that starts a line is dropped: editors write one at the start of a file, and files
    joined from several keep one per part); undecodable lines come back as bad."""
    for n, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        where = f"line {n}"
        try:
            text = decode_utf8(line, f"{rel} {where}")
        except NotUTF8 as e:
            yield RawRecord(rel, where, bad=f"undecodable line (UTF-8: {e.reason} at byte {e.offset})")
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            yield RawRecord(rel, where, bad=f"undecodable line (JSON: {e.msg} at column {e.colno})")
            continue
        if not isinstance(obj, dict):
            yield RawRecord(rel, where, bad=f"line is not a JSON object ({type(obj).__name__})")
            continue
        yield RawRecord(rel, where, obj)


def nonempty(items: Iterable[RawRecord], path, rel: str, opts: ReadOptions) -> Iterator[RawRecord]:
    """Pass ``items`` through; a file that yields none is an error (or a note, when allowed)."""
    n = 0
    for raw in items:
        n += 1
        yield raw
    if n == 0:
        if not opts.allow_empty:
            raise SourceFileError(f"{path}: empty source file (no records); restore it from its origin, "
                                  f"or set corpus.allow_empty_sources: true to count it as 0 records")
        opts.empty_files.append(rel)


def text_of(path) -> str:
    try:
        return read_text(path)
    except NotUTF8 as e:
        raise SourceFileError(str(e)) from None


def jsonl(data_dir, rel: str, opts: ReadOptions) -> Iterator[RawRecord]:
    path = data_file(data_dir, rel)
    yield from nonempty(_lines(path.read_bytes(), rel), path, rel, opts)


def zipped_jsonl(data_dir, rel: str, opts: ReadOptions) -> Iterator[RawRecord]:
    path = data_file(data_dir, rel)
    try:
        with zipfile.ZipFile(path) as z:
            members = [m for m in z.namelist() if m.endswith(".jsonl") and not m.startswith("__MACOSX")]
            if len(members) != 1:
                raise SourceFileError(f"{path}: expected one .jsonl member, found {members}")
            data = z.read(members[0])
    except zipfile.BadZipFile as e:
        raise SourceFileError(f"{path}: not a readable zip file ({e})") from None
    yield from nonempty(_lines(data, f"{rel}!{members[0]}"), f"{path}!{members[0]}", rel, opts)


class _Feed:
    """The lines of a text (line ends kept) handed to ``csv.reader`` one at a time; ``pos`` is the
    index of the next line, so the lines of each record are known."""

    def __init__(self, lines: list[str]):
        self.lines, self.pos = lines, 0

    def __iter__(self):
        return self

    def __next__(self) -> str:
        if self.pos >= len(self.lines):
            raise StopIteration
        self.pos += 1
        return self.lines[self.pos - 1]


def _span(first: int, last: int) -> str:
    return f"line {first}" if first == last else f"lines {first}-{last}"


def csv_records(text: str, rel: str, path=None) -> Iterator[RawRecord]:
    """Data rows of a CSV text as dicts keyed by the header; broken rows come back as bad.

    Strict: a row with another field count than the header, a quote that breaks the quoting rules,
    a quoted field left open at the end of the file and a last row with no line end (a cut file)
    are bad, each naming its line(s). After a quoting error the reader goes on at the next line."""
    feed = _Feed(io.StringIO(text, newline="").readlines())
    ends_cleanly = text.endswith(("\n", "\r"))
    rdr = csv.reader(feed, strict=True)
    try:
        header = csv_header(rdr, f"{path or rel}, line 1")
    except CSVHeaderError as e:
        raise SourceFileError(str(e)) from None
    if header is None:
        return
    width = len(header)
    n = 0
    while True:
        first = feed.pos + 1
        try:
            fields = next(rdr)
        except StopIteration:
            return
        except csv.Error as e:
            n += 1
            last = max(feed.pos, first)
            if feed.pos >= len(feed.lines) and "end of data" in str(e):
                yield RawRecord(rel, f"row {n} ({_span(first, last)})",
                           bad=f"unterminated quote: a quoted field opened in this row is still open at the "
                               f"end of the file (line {last}; a cut or damaged file)")
                return
            yield RawRecord(rel, f"row {n} ({_span(first, last)})",
                       bad=f"broken quoting at line {last}: {e} (a stray quote shifts the columns)")
            continue
        if not fields:
            continue  # a blank line
        n += 1
        last = feed.pos
        where = f"row {n} ({_span(first, last)})"
        if len(fields) != width:
            yield RawRecord(rel, where, bad=f"row has {len(fields)} fields, the header has {width}")
        elif last == len(feed.lines) and not ends_cleanly:
            yield RawRecord(rel, where, bad="the file ends inside this row (no line end): a row cut short")
        else:
            yield RawRecord(rel, where, dict(zip(header, fields)))


def csv_rows(data_dir, rel: str, opts: ReadOptions) -> Iterator[RawRecord]:
    path = data_file(data_dir, rel)
    yield from nonempty(csv_records(text_of(path), rel, path), path, rel, opts)


def json_array(data_dir, rel: str, opts: ReadOptions) -> Iterator[RawRecord]:
    path = data_file(data_dir, rel)
    text = text_of(path)
    try:
        data = json.loads(text) if text.strip() else []
    except json.JSONDecodeError as e:
        raise SourceFileError(f"{path}: not a readable JSON file ({e})") from None
    if not isinstance(data, list):
        raise SourceFileError(f"{path}: expected a JSON array of records, got {type(data).__name__}")
    yield from nonempty((RawRecord(rel, f"index {i}", obj) for i, obj in enumerate(data)), path, rel, opts)


# --------------------------------------------------------------------------- the common driver
def collect(source: str, items: Iterable[RawRecord], convert: Callable[[Any], dict], limit: int,
             opts: ReadOptions | None = None) -> SourceLoad:
    """Convert raw records (the first ``limit`` when > 0); quarantine what fails, with the reason.
    ``opts``: the reading options the items were read with (empty files go into the notes)."""
    out = SourceLoad(source)
    first_seen: dict[str, str] = {}
    for raw in items:
        if limit and out.raw >= limit:
            break
        out.raw += 1
        try:
            if raw.bad is not None:
                raise Reject(raw.bad)
            rec = convert(raw.value)
            sid = rec["source_id"]
            if sid in first_seen:
                raise Reject(f"duplicate source id {sid!r} (first at {first_seen[sid]})")
            first_seen[sid] = f"{raw.file} {raw.where}"
            out.records.append(rec)
        except Reject as e:
            out.quarantine.append({"source": source, "file": raw.file, "record": raw.where,
                                   "reason": str(e)})
    if opts is not None:
        out.notes.update(opts.notes())
    return out
