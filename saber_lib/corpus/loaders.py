"""One loader per corpus source, registered by name (``config.SOURCES``).

A loader reads its source's files from the data directory and returns a :class:`SourceLoad`: the
records in the normalized schema (``schema.CORPUS_SCHEMA``), the quarantined raw records with the
reason, and the number of raw records read. For every source

    raw = len(records) + len(quarantine)

and with ``limit > 0`` only the first ``limit`` raw records (file order) are read. A raw record is a
non-blank line of a JSON-lines file, a data row of a CSV file, an entry of a JSON array, or a problem
of the CHAMP package file. A record is quarantined when its line cannot be decoded (bad UTF-8, bad
JSON, not an object), a required field is missing or not text, its problem or solution is empty, or
its id repeats an id already read from the same source.

CSV files are read strictly: a row whose field count differs from the header's, a quote that breaks
the quoting rules (a stray quote inside a quoted field), a quoted field still open at the end of the
file, and a last row without a line end (a file cut short) are quarantined with the file, the line(s)
and the reason, never kept with shifted or cut columns. A CSV or JSON file that is not UTF-8 is an
error naming the file and the byte offset (:func:`saber_lib.data.read_text`).

A source file with no records at all (0 bytes, blank lines, a CSV header alone, ``[]``) is an error
naming the file, unless the loader is called with ``allow_empty=True`` (profile key
``corpus.allow_empty_sources``); then it counts 0 records and is listed in the load's
``notes["empty_files"]``.

Several solutions: the first becomes ``solution``, the others ``extra_solutions`` (source order).
"""
from __future__ import annotations

import csv
import io
import json
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from ..data import NotUTF8, data_file, read_text
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
class _Raw:
    file: str            # relative path (or package resource) for the quarantine table
    where: str           # "line 12", "row 3 (line 7)", "index 5", "problem P_x"
    value: Any = None    # the decoded object
    bad: str | None = None  # reason when the raw record could not even be decoded


@dataclass
class _Opts:
    """Per-load reading options, and what the readers noticed (empty files) for the notes."""

    allow_empty: bool = False
    empty_files: list[str] = field(default_factory=list)

    def notes(self) -> dict[str, Any]:
        return {"empty_files": list(self.empty_files)} if self.empty_files else {}


LOADERS: dict[str, Callable[..., SourceLoad]] = {}
FILES: dict[str, tuple[str, ...]] = {}


def register(name: str, files: tuple[str, ...] = ()):
    """Register ``fn(data_dir, limit, allow_empty=False) -> SourceLoad`` as the loader of ``name``."""

    def deco(fn):
        LOADERS[name] = fn
        FILES[name] = files
        return fn

    return deco


def load_source(name: str, data_dir, limit: int = 0, allow_empty: bool = False) -> SourceLoad:
    """Load source ``name``; ``allow_empty``: an empty source file counts 0 records instead of
    raising :class:`SourceFileError` (``corpus.allow_empty_sources``)."""
    if name not in LOADERS:
        raise KeyError(f"unknown corpus source {name!r} (known: {', '.join(LOADERS)})")
    return LOADERS[name](data_dir, limit, allow_empty=allow_empty)


# --------------------------------------------------------------------------- field helpers
def _field(obj, key: str):
    if not isinstance(obj, dict):
        raise Reject(f"record is not an object ({type(obj).__name__})")
    if key not in obj or obj[key] is None:
        raise Reject(f"missing field {key!r}")
    return obj[key]


def _text(obj, key: str) -> str:
    v = _field(obj, key)
    if not isinstance(v, str):
        raise Reject(f"field {key!r} is not text ({type(v).__name__})")
    return v


def _ident(obj, key: str) -> str:
    v = _field(obj, key)
    if isinstance(v, bool) or not isinstance(v, (str, int)):
        raise Reject(f"field {key!r} is not an id ({type(v).__name__})")
    v = str(v).strip()
    if not v:
        raise Reject(f"empty field {key!r}")
    return v


def _opt_text(obj, key: str) -> str | None:
    v = obj.get(key) if isinstance(obj, dict) else None
    if v is None:
        return None
    v = str(v).strip()
    return v or None


def make_record(source: str, source_id: str, problem: str, solutions: list[str],
                subject: str | None = None, level: str | None = None) -> dict:
    """Build one normalized record; raises :class:`Reject` for an empty problem or solution."""
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
        "license": LICENSES[source],
        "extra_solutions": sols[1:],
        "source_domain": source_domain(source, subject),
    }


# --------------------------------------------------------------------------- raw readers
def _lines(data: bytes, rel: str) -> Iterator[_Raw]:
    """Non-blank lines of a JSON-lines payload, decoded; undecodable lines come back as bad."""
    for n, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        where = f"line {n}"
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as e:
            yield _Raw(rel, where, bad=f"undecodable line (UTF-8: {e.reason} at byte {e.start})")
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            yield _Raw(rel, where, bad=f"undecodable line (JSON: {e.msg} at column {e.colno})")
            continue
        if not isinstance(obj, dict):
            yield _Raw(rel, where, bad=f"line is not a JSON object ({type(obj).__name__})")
            continue
        yield _Raw(rel, where, obj)


def _nonempty(items: Iterable[_Raw], path, rel: str, opts: _Opts) -> Iterator[_Raw]:
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


def _text_of(path) -> str:
    try:
        return read_text(path)
    except NotUTF8 as e:
        raise SourceFileError(str(e)) from None


def _jsonl(data_dir, rel: str, opts: _Opts) -> Iterator[_Raw]:
    path = data_file(data_dir, rel)
    yield from _nonempty(_lines(path.read_bytes(), rel), path, rel, opts)


def _zipped_jsonl(data_dir, rel: str, opts: _Opts) -> Iterator[_Raw]:
    path = data_file(data_dir, rel)
    try:
        with zipfile.ZipFile(path) as z:
            members = [m for m in z.namelist() if m.endswith(".jsonl") and not m.startswith("__MACOSX")]
            if len(members) != 1:
                raise SourceFileError(f"{path}: expected one .jsonl member, found {members}")
            data = z.read(members[0])
    except zipfile.BadZipFile as e:
        raise SourceFileError(f"{path}: not a readable zip file ({e})") from None
    yield from _nonempty(_lines(data, f"{rel}!{members[0]}"), f"{path}!{members[0]}", rel, opts)


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


def csv_records(text: str, rel: str, path=None) -> Iterator[_Raw]:
    """Data rows of a CSV text as dicts keyed by the header; broken rows come back as bad.

    Strict: a row with another field count than the header, a quote that breaks the quoting rules,
    a quoted field left open at the end of the file and a last row with no line end (a cut file)
    are bad, each naming its line(s). After a quoting error the reader goes on at the next line."""
    feed = _Feed(io.StringIO(text, newline="").readlines())
    ends_cleanly = text.endswith(("\n", "\r"))
    rdr = csv.reader(feed, strict=True)
    try:
        header = next(rdr)
    except StopIteration:
        return
    except csv.Error as e:
        raise SourceFileError(f"{path or rel} line 1: the header cannot be read as CSV ({e})") from None
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
                yield _Raw(rel, f"row {n} ({_span(first, last)})",
                           bad=f"unterminated quote: a quoted field opened in this row is still open at the "
                               f"end of the file (line {last}; a cut or damaged file)")
                return
            yield _Raw(rel, f"row {n} ({_span(first, last)})",
                       bad=f"broken quoting at line {last}: {e} (a stray quote shifts the columns)")
            continue
        if not fields:
            continue  # a blank line
        n += 1
        last = feed.pos
        where = f"row {n} ({_span(first, last)})"
        if len(fields) != width:
            yield _Raw(rel, where, bad=f"row has {len(fields)} fields, the header has {width}")
        elif last == len(feed.lines) and not ends_cleanly:
            yield _Raw(rel, where, bad="the file ends inside this row (no line end): a row cut short")
        else:
            yield _Raw(rel, where, dict(zip(header, fields)))


def _csv_rows(data_dir, rel: str, opts: _Opts) -> Iterator[_Raw]:
    path = data_file(data_dir, rel)
    yield from _nonempty(csv_records(_text_of(path), rel, path), path, rel, opts)


def _json_array(data_dir, rel: str, opts: _Opts) -> Iterator[_Raw]:
    path = data_file(data_dir, rel)
    text = _text_of(path)
    try:
        data = json.loads(text) if text.strip() else []
    except json.JSONDecodeError as e:
        raise SourceFileError(f"{path}: not a readable JSON file ({e})") from None
    if not isinstance(data, list):
        raise SourceFileError(f"{path}: expected a JSON array of records, got {type(data).__name__}")
    yield from _nonempty((_Raw(rel, f"index {i}", obj) for i, obj in enumerate(data)), path, rel, opts)


# --------------------------------------------------------------------------- the common driver
def _collect(source: str, items: Iterable[_Raw], convert: Callable[[Any], dict], limit: int,
             opts: _Opts | None = None) -> SourceLoad:
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


# --------------------------------------------------------------------------- the sources
IMO_FILE = "sources/imo_proofbench/proofbench_v2.csv"


@register("imo_proofbench", (IMO_FILE,))
def load_imo_proofbench(data_dir, limit: int = 0, allow_empty: bool = False) -> SourceLoad:
    """IMO-ProofBench: CSV with Problem ID, Problem, Solution, Category, Level."""
    opts = _Opts(allow_empty)

    def convert(row):
        return make_record("imo_proofbench", _ident(row, "Problem ID"), _text(row, "Problem"),
                           [_text(row, "Solution")], _opt_text(row, "Category"), _opt_text(row, "Level"))

    return _collect("imo_proofbench", _csv_rows(data_dir, IMO_FILE, opts), convert, limit, opts)


HARP_FILE = "sources/harp_proof/HARP_proof-based.jsonl.zip"


@register("harp_proof", (HARP_FILE,))
def load_harp_proof(data_dir, limit: int = 0, allow_empty: bool = False) -> SourceLoad:
    """HARP proof-based: zipped JSON lines; id YEAR/CONTEST/NUMBER; solutions solution_1..4."""
    opts = _Opts(allow_empty)

    def convert(obj):
        sid = f"{_ident(obj, 'year')}/{_ident(obj, 'contest')}/{_ident(obj, 'number')}"
        sols = [obj.get(f"solution_{i}") for i in range(1, 5)]
        if not isinstance(obj.get("solution_1"), str):
            _text(obj, "solution_1")  # raises: missing or not text
        return make_record("harp_proof", sid, _text(obj, "problem"), sols,
                           _opt_text(obj, "subject"), _opt_text(obj, "level"))

    return _collect("harp_proof", _zipped_jsonl(data_dir, HARP_FILE, opts), convert, limit, opts)


AIME_FILE = "sources/aime/aime.json"
AIME_LABELS = "sources/aime/aops_subject_labels.jsonl"


def aime_uid(year: int, aime_number: int, problem_number: int) -> str:
    """AoPS uid ``YEAR/CONTEST/NUMBER`` of an AIME problem.

    Before 2000 there was one AIME a year (contest ``AIME``); from 2000 on two, ``AIME_I`` and
    ``AIME_II`` (``aime_number`` 1 or 2). The 2023 problems 15 are stored with ``problem_number``
    0 in aime.json (their texts are 2023 AIME I/II problem 15), so 0 means 15.
    """
    number = 15 if problem_number == 0 else problem_number
    if year < 2000:
        contest = "AIME"
    elif aime_number in (1, 2):
        contest = "AIME_" + "I" * aime_number
    else:
        raise Reject(f"aime_number {aime_number!r} is not 1 or 2")
    return f"{year}/{contest}/{number}"


def _int(obj, key: str) -> int:
    v = _field(obj, key)
    try:
        return int(v)
    except (TypeError, ValueError):
        raise Reject(f"field {key!r} is not an integer ({v!r})") from None


def load_aime_labels(data_dir, opts: _Opts | None = None) -> tuple[dict[str, str], int]:
    """uid -> AoPS subject, and the number of unreadable label lines (skipped)."""
    opts = opts if opts is not None else _Opts()
    labels: dict[str, str] = {}
    bad = 0
    for raw in _jsonl(data_dir, AIME_LABELS, opts):
        uid = raw.value.get("uid") if raw.value else None
        subj = raw.value.get("subject") if raw.value else None
        if raw.bad or not isinstance(uid, str) or not isinstance(subj, str):
            bad += 1
            continue
        labels[uid] = subj
    return labels, bad


@register("aime", (AIME_FILE, AIME_LABELS))
def load_aime(data_dir, limit: int = 0, allow_empty: bool = False) -> SourceLoad:
    """AIME 1983-2023 (JSON array); subject from the AoPS labels by uid (see :func:`aime_uid`)."""
    opts = _Opts(allow_empty)
    labels, bad_labels = load_aime_labels(data_dir, opts)

    def convert(obj):
        uid = aime_uid(_int(obj, "year"), _int(obj, "aime_number"), _int(obj, "problem_number"))
        return make_record("aime", uid, _text(obj, "problem"), [_text(obj, "solution")],
                           labels.get(uid), _opt_text(obj, "difficulty"))

    out = _collect("aime", _json_array(data_dir, AIME_FILE, opts), convert, limit, opts)
    out.notes.update({"label_lines_unreadable": bad_labels,
                      "records_without_label": sum(r["source_subject"] is None for r in out.records)})
    return out


OLYMPIADBENCH_FILE = "sources/olympiadbench/test.jsonl"


@register("olympiadbench", (OLYMPIADBENCH_FILE,))
def load_olympiadbench(data_dir, limit: int = 0, allow_empty: bool = False) -> SourceLoad:
    """OlympiadBench (English, text-only): question (context first when present); the solution list
    holds alternative solutions, so the first is ``solution`` and the rest ``extra_solutions``."""
    opts = _Opts(allow_empty)

    def convert(obj):
        sols = _field(obj, "solution")
        if isinstance(sols, str):
            sols = [sols]
        if not isinstance(sols, list):
            raise Reject(f"field 'solution' is not a list ({type(sols).__name__})")
        question = _text(obj, "question")
        context = obj.get("context")
        if isinstance(context, str) and context.strip() and context.strip() != "None":
            question = context.strip() + "\n\n" + question
        return make_record("olympiadbench", _ident(obj, "id"), question, sols,
                           _opt_text(obj, "subfield"), None)

    return _collect("olympiadbench", _jsonl(data_dir, OLYMPIADBENCH_FILE, opts), convert, limit, opts)


OMNI_FILE = "sources/omni_math_rule/omni_math_rule.jsonl"


def omni_subject(paths) -> str | None:
    """Omni-MATH domain paths ``["Mathematics -> A -> B", ...]`` as plain text ``"A > B; ..."``."""
    if isinstance(paths, str):
        paths = [paths]
    if not isinstance(paths, list):
        return None
    out = []
    for p in paths:
        if not isinstance(p, str):
            continue
        parts = [x.strip() for x in p.split("->") if x.strip()]
        if parts and parts[0] == "Mathematics":
            parts = parts[1:]
        if parts:
            out.append(" > ".join(parts))
    return "; ".join(out) or None


@register("omni_math_rule", (OMNI_FILE,))
def load_omni_math_rule(data_dir, limit: int = 0, allow_empty: bool = False) -> SourceLoad:
    """Omni-MATH (rule-checkable subset): no ids in the file, so the id is the line number."""
    opts = _Opts(allow_empty)
    # line numbers are the ids: build them from the raw position, not the content
    def items():
        for raw in _jsonl(data_dir, OMNI_FILE, opts):
            if raw.value is not None:
                raw.value["__line"] = raw.where.split()[-1]
            yield raw

    def convert(obj):
        return make_record("omni_math_rule", obj["__line"], _text(obj, "problem"),
                           [_text(obj, "solution")], omni_subject(obj.get("domain")),
                           _opt_text(obj, "difficulty"))

    return _collect("omni_math_rule", items(), convert, limit, opts)


MATH_FILE = "sources/math/math.jsonl"


@register("math", (MATH_FILE,))
def load_math(data_dir, limit: int = 0, allow_empty: bool = False) -> SourceLoad:
    """MATH (train + test): id ``split/subject/n.json``, subject = ``type``, level = ``level``."""
    opts = _Opts(allow_empty)

    def convert(obj):
        return make_record("math", _ident(obj, "id"), _text(obj, "problem"), [_text(obj, "solution")],
                           _opt_text(obj, "type"), _opt_text(obj, "level"))

    return _collect("math", _jsonl(data_dir, MATH_FILE, opts), convert, limit, opts)


PROOFNET_FILES = ("sources/proofnet/valid.jsonl", "sources/proofnet/test.jsonl")
_PROOF_ENV = re.compile(r"^\s*\\begin\{proof\}|\\end\{proof\}\s*$")


@register("proofnet", PROOFNET_FILES)
def load_proofnet(data_dir, limit: int = 0, allow_empty: bool = False) -> SourceLoad:
    """ProofNet (valid then test): id ``Book|exercise``; subject = the book; the proof's
    ``\\begin{proof} ... \\end{proof}`` wrapper is dropped."""
    opts = _Opts(allow_empty)

    def items():
        for rel in PROOFNET_FILES:
            yield from _jsonl(data_dir, rel, opts)

    def convert(obj):
        sid = _ident(obj, "id")
        proof = _PROOF_ENV.sub("", _text(obj, "nl_proof"))
        return make_record("proofnet", sid, _text(obj, "nl_statement"), [proof],
                           sid.split("|")[0] if "|" in sid else None, None)

    return _collect("proofnet", items(), convert, limit, opts)


MINIF2F_FILE = "sources/minif2f/informal.jsonl"
_MINIF2F_SUBJECT = re.compile(r"^(?:mathd_)?(algebra|numbertheory)_")


@register("minif2f", (MINIF2F_FILE,))
def load_minif2f(data_dir, limit: int = 0, allow_empty: bool = False) -> SourceLoad:
    """miniF2F informal statements and proofs; the subject is the one named in the problem name
    (``mathd_algebra_*``, ``numbertheory_*``), else null."""
    opts = _Opts(allow_empty)

    def convert(obj):
        name = _ident(obj, "problem_name")
        m = _MINIF2F_SUBJECT.match(name)
        return make_record("minif2f", name, _text(obj, "informal_statement"),
                           [_text(obj, "informal_proof")], m.group(1) if m else None, None)

    return _collect("minif2f", _jsonl(data_dir, MINIF2F_FILE, opts), convert, limit, opts)


CHAMP_RESOURCE = ("champ_dataset", "dataset_files/v0.json")


def champ_path() -> Path:
    """The CHAMP data file inside the installed ``champ-dataset`` package."""
    from importlib import resources

    try:
        root = resources.files(CHAMP_RESOURCE[0])
    except ModuleNotFoundError:
        raise SourceFileError("source 'champ' needs the package champ-dataset==1.0.0 "
                              "(pip install champ-dataset==1.0.0)") from None
    p = root.joinpath(*CHAMP_RESOURCE[1].split("/"))
    if not p.is_file():
        raise SourceFileError(f"{p}: CHAMP data file missing from the champ-dataset package")
    return Path(str(p))


def _champ_items(path: Path) -> Iterator[_Raw]:
    rel = "/".join(CHAMP_RESOURCE)
    try:
        data = json.loads(_text_of(path))
    except json.JSONDecodeError as e:
        raise SourceFileError(f"{path}: not a readable JSON file ({e})") from None
    problems = data.get("problems") if isinstance(data, dict) else None
    if not isinstance(problems, dict):
        raise SourceFileError(f"{path}: expected an object with a 'problems' mapping")
    for key, obj in problems.items():
        if isinstance(obj, dict):
            obj = {**obj, "__key": key}
        yield _Raw(rel, f"problem {key}", obj)


def _champ_file(path: Path, opts: _Opts) -> Iterator[_Raw]:
    yield from _nonempty(_champ_items(path), path, "/".join(CHAMP_RESOURCE), opts)


def champ_solution_text(solution) -> str:
    """CHAMP's structured solution ``{"steps": [{"_text": ...}, ...]}`` as plain text, one step a line."""
    if not isinstance(solution, dict) or not isinstance(solution.get("steps"), list):
        raise Reject("field 'solution' has no list of steps")
    steps = []
    for st in solution["steps"]:
        t = st.get("_text") if isinstance(st, dict) else None
        if not isinstance(t, str):
            raise Reject("a solution step has no text")
        if t.strip():
            steps.append(t.strip())
    return "\n".join(steps)


@register("champ")
def load_champ(data_dir=None, limit: int = 0, allow_empty: bool = False, path: Path | None = None) -> SourceLoad:
    """CHAMP (package champ-dataset 1.0.0): plain ``_text`` of the problem and of each solution step.
    ``path`` overrides the package file (for tests)."""
    opts = _Opts(allow_empty)

    def convert(obj):
        if not isinstance(obj, dict):
            raise Reject(f"record is not an object ({type(obj).__name__})")
        sid = obj.get("identifier") or obj.get("__key")
        if not isinstance(sid, str) or not sid.strip():
            raise Reject("missing field 'identifier'")
        return make_record("champ", sid.strip(), _text(obj, "_text"),
                           [champ_solution_text(_field(obj, "solution"))], _opt_text(obj, "category"))

    return _collect("champ", _champ_file(path or champ_path(), opts), convert, limit, opts)
