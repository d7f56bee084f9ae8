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

from ..data import data_file
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


LOADERS: dict[str, Callable[[Any, int], SourceLoad]] = {}
FILES: dict[str, tuple[str, ...]] = {}


def register(name: str, files: tuple[str, ...] = ()):
    """Register ``fn(data_dir, limit) -> SourceLoad`` as the loader of source ``name``."""

    def deco(fn):
        LOADERS[name] = fn
        FILES[name] = files
        return fn

    return deco


def load_source(name: str, data_dir, limit: int = 0) -> SourceLoad:
    if name not in LOADERS:
        raise KeyError(f"unknown corpus source {name!r} (known: {', '.join(LOADERS)})")
    return LOADERS[name](data_dir, limit)


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


def _jsonl(data_dir, rel: str) -> Iterator[_Raw]:
    yield from _lines(data_file(data_dir, rel).read_bytes(), rel)


def _zipped_jsonl(data_dir, rel: str) -> Iterator[_Raw]:
    path = data_file(data_dir, rel)
    try:
        with zipfile.ZipFile(path) as z:
            members = [m for m in z.namelist() if m.endswith(".jsonl") and not m.startswith("__MACOSX")]
            if len(members) != 1:
                raise SourceFileError(f"{path}: expected one .jsonl member, found {members}")
            data = z.read(members[0])
    except zipfile.BadZipFile as e:
        raise SourceFileError(f"{path}: not a readable zip file ({e})") from None
    yield from _lines(data, f"{rel}!{members[0]}")


def _csv_rows(data_dir, rel: str) -> Iterator[_Raw]:
    path = data_file(data_dir, rel)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise SourceFileError(f"{path}: not UTF-8 text ({e})") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    for n, row in enumerate(reader, start=1):
        yield _Raw(rel, f"row {n} (line {reader.line_num})", row)


def _json_array(data_dir, rel: str) -> Iterator[_Raw]:
    path = data_file(data_dir, rel)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SourceFileError(f"{path}: not a readable JSON file ({e})") from None
    if not isinstance(data, list):
        raise SourceFileError(f"{path}: expected a JSON array of records, got {type(data).__name__}")
    for i, obj in enumerate(data):
        yield _Raw(rel, f"index {i}", obj)


# --------------------------------------------------------------------------- the common driver
def _collect(source: str, items: Iterable[_Raw], convert: Callable[[Any], dict], limit: int) -> SourceLoad:
    """Convert raw records (the first ``limit`` when > 0); quarantine what fails, with the reason."""
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
    return out


# --------------------------------------------------------------------------- the sources
IMO_FILE = "sources/imo_proofbench/proofbench_v2.csv"


@register("imo_proofbench", (IMO_FILE,))
def load_imo_proofbench(data_dir, limit: int = 0) -> SourceLoad:
    """IMO-ProofBench: CSV with Problem ID, Problem, Solution, Category, Level."""

    def convert(row):
        return make_record("imo_proofbench", _ident(row, "Problem ID"), _text(row, "Problem"),
                           [_text(row, "Solution")], _opt_text(row, "Category"), _opt_text(row, "Level"))

    return _collect("imo_proofbench", _csv_rows(data_dir, IMO_FILE), convert, limit)


HARP_FILE = "sources/harp_proof/HARP_proof-based.jsonl.zip"


@register("harp_proof", (HARP_FILE,))
def load_harp_proof(data_dir, limit: int = 0) -> SourceLoad:
    """HARP proof-based: zipped JSON lines; id YEAR/CONTEST/NUMBER; solutions solution_1..4."""

    def convert(obj):
        sid = f"{_ident(obj, 'year')}/{_ident(obj, 'contest')}/{_ident(obj, 'number')}"
        sols = [obj.get(f"solution_{i}") for i in range(1, 5)]
        if not isinstance(obj.get("solution_1"), str):
            _text(obj, "solution_1")  # raises: missing or not text
        return make_record("harp_proof", sid, _text(obj, "problem"), sols,
                           _opt_text(obj, "subject"), _opt_text(obj, "level"))

    return _collect("harp_proof", _zipped_jsonl(data_dir, HARP_FILE), convert, limit)


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


def load_aime_labels(data_dir) -> tuple[dict[str, str], int]:
    """uid -> AoPS subject, and the number of unreadable label lines (skipped)."""
    labels: dict[str, str] = {}
    bad = 0
    for raw in _jsonl(data_dir, AIME_LABELS):
        uid = raw.value.get("uid") if raw.value else None
        subj = raw.value.get("subject") if raw.value else None
        if raw.bad or not isinstance(uid, str) or not isinstance(subj, str):
            bad += 1
            continue
        labels[uid] = subj
    return labels, bad


@register("aime", (AIME_FILE, AIME_LABELS))
def load_aime(data_dir, limit: int = 0) -> SourceLoad:
    """AIME 1983-2023 (JSON array); subject from the AoPS labels by uid (see :func:`aime_uid`)."""
    labels, bad_labels = load_aime_labels(data_dir)

    def convert(obj):
        uid = aime_uid(_int(obj, "year"), _int(obj, "aime_number"), _int(obj, "problem_number"))
        return make_record("aime", uid, _text(obj, "problem"), [_text(obj, "solution")],
                           labels.get(uid), _opt_text(obj, "difficulty"))

    out = _collect("aime", _json_array(data_dir, AIME_FILE), convert, limit)
    out.notes = {"label_lines_unreadable": bad_labels,
                 "records_without_label": sum(r["source_subject"] is None for r in out.records)}
    return out


OLYMPIADBENCH_FILE = "sources/olympiadbench/test.jsonl"


@register("olympiadbench", (OLYMPIADBENCH_FILE,))
def load_olympiadbench(data_dir, limit: int = 0) -> SourceLoad:
    """OlympiadBench (English, text-only): question (context first when present); the solution list
    holds alternative solutions, so the first is ``solution`` and the rest ``extra_solutions``."""

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

    return _collect("olympiadbench", _jsonl(data_dir, OLYMPIADBENCH_FILE), convert, limit)


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
def load_omni_math_rule(data_dir, limit: int = 0) -> SourceLoad:
    """Omni-MATH (rule-checkable subset): no ids in the file, so the id is the line number."""
    # line numbers are the ids: build them from the raw position, not the content
    def items():
        for raw in _jsonl(data_dir, OMNI_FILE):
            if raw.value is not None:
                raw.value["__line"] = raw.where.split()[-1]
            yield raw

    def convert(obj):
        return make_record("omni_math_rule", obj["__line"], _text(obj, "problem"),
                           [_text(obj, "solution")], omni_subject(obj.get("domain")),
                           _opt_text(obj, "difficulty"))

    return _collect("omni_math_rule", items(), convert, limit)


MATH_FILE = "sources/math/math.jsonl"


@register("math", (MATH_FILE,))
def load_math(data_dir, limit: int = 0) -> SourceLoad:
    """MATH (train + test): id ``split/subject/n.json``, subject = ``type``, level = ``level``."""

    def convert(obj):
        return make_record("math", _ident(obj, "id"), _text(obj, "problem"), [_text(obj, "solution")],
                           _opt_text(obj, "type"), _opt_text(obj, "level"))

    return _collect("math", _jsonl(data_dir, MATH_FILE), convert, limit)


PROOFNET_FILES = ("sources/proofnet/valid.jsonl", "sources/proofnet/test.jsonl")
_PROOF_ENV = re.compile(r"^\s*\\begin\{proof\}|\\end\{proof\}\s*$")


@register("proofnet", PROOFNET_FILES)
def load_proofnet(data_dir, limit: int = 0) -> SourceLoad:
    """ProofNet (valid then test): id ``Book|exercise``; subject = the book; the proof's
    ``\\begin{proof} ... \\end{proof}`` wrapper is dropped."""

    def items():
        for rel in PROOFNET_FILES:
            yield from _jsonl(data_dir, rel)

    def convert(obj):
        sid = _ident(obj, "id")
        proof = _PROOF_ENV.sub("", _text(obj, "nl_proof"))
        return make_record("proofnet", sid, _text(obj, "nl_statement"), [proof],
                           sid.split("|")[0] if "|" in sid else None, None)

    return _collect("proofnet", items(), convert, limit)


MINIF2F_FILE = "sources/minif2f/informal.jsonl"
_MINIF2F_SUBJECT = re.compile(r"^(?:mathd_)?(algebra|numbertheory)_")


@register("minif2f", (MINIF2F_FILE,))
def load_minif2f(data_dir, limit: int = 0) -> SourceLoad:
    """miniF2F informal statements and proofs; the subject is the one named in the problem name
    (``mathd_algebra_*``, ``numbertheory_*``), else null."""

    def convert(obj):
        name = _ident(obj, "problem_name")
        m = _MINIF2F_SUBJECT.match(name)
        return make_record("minif2f", name, _text(obj, "informal_statement"),
                           [_text(obj, "informal_proof")], m.group(1) if m else None, None)

    return _collect("minif2f", _jsonl(data_dir, MINIF2F_FILE), convert, limit)


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
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SourceFileError(f"{path}: not a readable JSON file ({e})") from None
    problems = data.get("problems") if isinstance(data, dict) else None
    if not isinstance(problems, dict):
        raise SourceFileError(f"{path}: expected an object with a 'problems' mapping")
    for key, obj in problems.items():
        if isinstance(obj, dict):
            obj = {**obj, "__key": key}
        yield _Raw(rel, f"problem {key}", obj)


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
def load_champ(data_dir=None, limit: int = 0, path: Path | None = None) -> SourceLoad:
    """CHAMP (package champ-dataset 1.0.0): plain ``_text`` of the problem and of each solution step.
    ``path`` overrides the package file (for tests)."""

    def convert(obj):
        if not isinstance(obj, dict):
            raise Reject(f"record is not an object ({type(obj).__name__})")
        sid = obj.get("identifier") or obj.get("__key")
        if not isinstance(sid, str) or not sid.strip():
            raise Reject("missing field 'identifier'")
        return make_record("champ", sid.strip(), _text(obj, "_text"),
                           [champ_solution_text(_field(obj, "solution"))], _opt_text(obj, "category"))

    return _collect("champ", _champ_items(path or champ_path()), convert, limit)
