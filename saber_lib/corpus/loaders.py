"""One loader per corpus source, registered by name (built in: ``config.SOURCES``; a plugin adds its own
with :func:`register`).

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
error naming the file and the byte offset (:func:`saber_lib.core.data.read_text`).

A source file with no records at all (0 bytes, blank lines, a CSV header alone, ``[]``) is an error
naming the file, unless the loader is called with ``allow_empty=True`` (profile key
``corpus.allow_empty_sources``); then it counts 0 records and is listed in the load's
``notes["empty_files"]``.

Several solutions: the first becomes ``solution``, the others ``extra_solutions`` (source order).
"""
from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path
from typing import Callable, Iterator

from ..core import plugins
from .readers import (ReadOptions, RawRecord, Reject, SourceFileError, SourceLoad, collect, csv_rows,
                      get_field, ident_field, json_array, jsonl, make_record, nonempty, optional_text,
                      text_field, text_of, zipped_jsonl)


LOADERS: dict[str, Callable[..., SourceLoad]] = {}
FILES: dict[str, tuple[str, ...]] = {}


def register(name: str, files: tuple[str, ...] = ()):
    """Register ``fn(data_dir, limit, allow_empty=False) -> SourceLoad`` as the loader of ``name``."""

    def deco(fn):
        old = LOADERS.get(name)
        if old is not None and old.__module__ != fn.__module__:
            raise ValueError(f"module {fn.__module__}: corpus source {name!r} is already registered by {old.__module__}; "
                             "choose another name")
        if fn.__module__ != __name__:
            plugins.note_registration(fn.__module__, name)
        LOADERS[name] = fn
        FILES[name] = files
        return fn

    return deco


def load_source(name: str, data_dir, limit: int = 0, allow_empty: bool = False) -> SourceLoad:
    """Load source ``name``; ``allow_empty``: an empty source file counts 0 records instead of
    raising :class:`SourceFileError` (``corpus.allow_empty_sources``)."""
    if name not in LOADERS:
        plugins.load_from_environment()   # a stage's kernel: the run's plugins
    if name not in LOADERS:
        raise KeyError(f"unknown corpus source {name!r} (known: {', '.join(LOADERS)})")
    fn = LOADERS[name]
    got = fn(data_dir, limit, allow_empty=allow_empty)
    if not isinstance(got, SourceLoad):
        raise SourceFileError(f"corpus source {name!r} (module {fn.__module__}): the loader returned "
                              f"{type(got).__name__}, not a saber_lib.corpus.SourceLoad")
    return _unique_doc_ids(got, FILES.get(name) or ())


def _unique_doc_ids(load: SourceLoad, files) -> SourceLoad:
    """``load`` with every record whose ``doc_id`` an earlier record of it holds moved to the quarantine
    (the built-in readers quarantine a repeated source id as they read; a plugin's loader may not)."""
    first: dict[str, int] = {}
    kept = []
    for k, rec in enumerate(load.records, start=1):
        doc = rec.get("doc_id") if isinstance(rec, dict) else None
        if doc in first:
            load.quarantine.append({"source": load.source, "file": ", ".join(files), "record": f"record {k}",
                                    "reason": f"duplicate doc_id {doc!r} (first at record {first[doc]})"})
        else:
            first.setdefault(doc, k)
            kept.append(rec)
    load.records = kept
    return load


# --------------------------------------------------------------------------- the sources
IMO_FILE = "sources/imo_proofbench/proofbench_v2.csv"


@register("imo_proofbench", (IMO_FILE,))
def load_imo_proofbench(data_dir, limit: int = 0, allow_empty: bool = False) -> SourceLoad:
    """IMO-ProofBench: CSV with Problem ID, Problem, Solution, Category, Level."""
    opts = ReadOptions(allow_empty)

    def convert(row):
        return make_record("imo_proofbench", ident_field(row, "Problem ID"), text_field(row, "Problem"),
                           [text_field(row, "Solution")], optional_text(row, "Category"), optional_text(row, "Level"))

    return collect("imo_proofbench", csv_rows(data_dir, IMO_FILE, opts), convert, limit, opts)


HARP_FILE = "sources/harp_proof/HARP_proof-based.jsonl.zip"


@register("harp_proof", (HARP_FILE,))
def load_harp_proof(data_dir, limit: int = 0, allow_empty: bool = False) -> SourceLoad:
    """HARP proof-based: zipped JSON lines; id YEAR/CONTEST/NUMBER; solutions solution_1..4."""
    opts = ReadOptions(allow_empty)

    def convert(obj):
        sid = f"{ident_field(obj, 'year')}/{ident_field(obj, 'contest')}/{ident_field(obj, 'number')}"
        sols = [obj.get(f"solution_{i}") for i in range(1, 5)]
        if not isinstance(obj.get("solution_1"), str):
            text_field(obj, "solution_1")  # raises: missing or not text
        return make_record("harp_proof", sid, text_field(obj, "problem"), sols,
                           optional_text(obj, "subject"), optional_text(obj, "level"))

    return collect("harp_proof", zipped_jsonl(data_dir, HARP_FILE, opts), convert, limit, opts)


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
    v = get_field(obj, key)
    try:
        return int(v)
    except (TypeError, ValueError):
        raise Reject(f"field {key!r} is not an integer ({v!r})") from None


def load_aime_labels(data_dir, opts: ReadOptions | None = None) -> tuple[dict[str, str], int]:
    """uid -> AoPS subject, and the number of unreadable label lines (skipped)."""
    opts = opts if opts is not None else ReadOptions()
    labels: dict[str, str] = {}
    bad = 0
    for raw in jsonl(data_dir, AIME_LABELS, opts):
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
    opts = ReadOptions(allow_empty)
    labels, bad_labels = load_aime_labels(data_dir, opts)

    def convert(obj):
        uid = aime_uid(_int(obj, "year"), _int(obj, "aime_number"), _int(obj, "problem_number"))
        return make_record("aime", uid, text_field(obj, "problem"), [text_field(obj, "solution")],
                           labels.get(uid), optional_text(obj, "difficulty"))

    out = collect("aime", json_array(data_dir, AIME_FILE, opts), convert, limit, opts)
    out.notes.update({"label_lines_unreadable": bad_labels,
                      "records_without_label": sum(r["source_subject"] is None for r in out.records)})
    return out


OLYMPIADBENCH_FILE = "sources/olympiadbench/test.jsonl"


@register("olympiadbench", (OLYMPIADBENCH_FILE,))
def load_olympiadbench(data_dir, limit: int = 0, allow_empty: bool = False) -> SourceLoad:
    """OlympiadBench (English, text-only): question (context first when present); the solution list
    holds alternative solutions, so the first is ``solution`` and the rest ``extra_solutions``."""
    opts = ReadOptions(allow_empty)

    def convert(obj):
        sols = get_field(obj, "solution")
        if isinstance(sols, str):
            sols = [sols]
        if not isinstance(sols, list):
            raise Reject(f"field 'solution' is not a list ({type(sols).__name__})")
        question = text_field(obj, "question")
        context = obj.get("context")
        if isinstance(context, str) and context.strip() and context.strip() != "None":
            question = context.strip() + "\n\n" + question
        return make_record("olympiadbench", ident_field(obj, "id"), question, sols,
                           optional_text(obj, "subfield"), None)

    return collect("olympiadbench", jsonl(data_dir, OLYMPIADBENCH_FILE, opts), convert, limit, opts)


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
    opts = ReadOptions(allow_empty)
    # line numbers are the ids: build them from the raw position, not the content
    def items():
        for raw in jsonl(data_dir, OMNI_FILE, opts):
            if raw.value is not None:
                raw.value["__line"] = raw.where.split()[-1]
            yield raw

    def convert(obj):
        return make_record("omni_math_rule", obj["__line"], text_field(obj, "problem"),
                           [text_field(obj, "solution")], omni_subject(obj.get("domain")),
                           optional_text(obj, "difficulty"))

    return collect("omni_math_rule", items(), convert, limit, opts)


MATH_FILE = "sources/math/math.jsonl"


@register("math", (MATH_FILE,))
def load_math(data_dir, limit: int = 0, allow_empty: bool = False) -> SourceLoad:
    """MATH (train + test): id ``split/subject/n.json``, subject = ``type``, level = ``level``."""
    opts = ReadOptions(allow_empty)

    def convert(obj):
        return make_record("math", ident_field(obj, "id"), text_field(obj, "problem"), [text_field(obj, "solution")],
                           optional_text(obj, "type"), optional_text(obj, "level"))

    return collect("math", jsonl(data_dir, MATH_FILE, opts), convert, limit, opts)


PROOFNET_FILES = ("sources/proofnet/valid.jsonl", "sources/proofnet/test.jsonl")
_PROOF_ENV = re.compile(r"^\s*\\begin\{proof\}|\\end\{proof\}\s*$")


@register("proofnet", PROOFNET_FILES)
def load_proofnet(data_dir, limit: int = 0, allow_empty: bool = False) -> SourceLoad:
    """ProofNet (valid then test): id ``Book|exercise``; subject = the book; the proof's
    ``\\begin{proof} ... \\end{proof}`` wrapper is dropped."""
    opts = ReadOptions(allow_empty)

    def items():
        for rel in PROOFNET_FILES:
            yield from jsonl(data_dir, rel, opts)

    def convert(obj):
        sid = ident_field(obj, "id")
        proof = _PROOF_ENV.sub("", text_field(obj, "nl_proof"))
        return make_record("proofnet", sid, text_field(obj, "nl_statement"), [proof],
                           sid.split("|")[0] if "|" in sid else None, None)

    return collect("proofnet", items(), convert, limit, opts)


MINIF2F_FILE = "sources/minif2f/informal.jsonl"
_MINIF2F_SUBJECT = re.compile(r"^(?:mathd_)?(algebra|numbertheory)_")


@register("minif2f", (MINIF2F_FILE,))
def load_minif2f(data_dir, limit: int = 0, allow_empty: bool = False) -> SourceLoad:
    """miniF2F informal statements and proofs; the subject is the one named in the problem name
    (``mathd_algebra_*``, ``numbertheory_*``), else null."""
    opts = ReadOptions(allow_empty)

    def convert(obj):
        name = ident_field(obj, "problem_name")
        m = _MINIF2F_SUBJECT.match(name)
        return make_record("minif2f", name, text_field(obj, "informal_statement"),
                           [text_field(obj, "informal_proof")], m.group(1) if m else None, None)

    return collect("minif2f", jsonl(data_dir, MINIF2F_FILE, opts), convert, limit, opts)


CHAMP_RESOURCE = ("champ_dataset", "dataset_files/v0.json")


def champ_path() -> Path:
    """The CHAMP data file inside the installed ``champ-dataset`` package."""

    try:
        root = resources.files(CHAMP_RESOURCE[0])
    except ModuleNotFoundError:
        raise SourceFileError("source 'champ' needs the package champ-dataset==1.0.0 "
                              "(pip install champ-dataset==1.0.0)") from None
    p = root.joinpath(*CHAMP_RESOURCE[1].split("/"))
    if not p.is_file():
        raise SourceFileError(f"{p}: CHAMP data file missing from the champ-dataset package")
    return Path(str(p))


def _champ_items(path: Path) -> Iterator[RawRecord]:
    rel = "/".join(CHAMP_RESOURCE)
    try:
        data = json.loads(text_of(path))
    except json.JSONDecodeError as e:
        raise SourceFileError(f"{path}: not a readable JSON file ({e})") from None
    problems = data.get("problems") if isinstance(data, dict) else None
    if not isinstance(problems, dict):
        raise SourceFileError(f"{path}: expected an object with a 'problems' mapping")
    for key, obj in problems.items():
        if isinstance(obj, dict):
            obj = {**obj, "__key": key}
        yield RawRecord(rel, f"problem {key}", obj)


def _champ_file(path: Path, opts: ReadOptions) -> Iterator[RawRecord]:
    yield from nonempty(_champ_items(path), path, "/".join(CHAMP_RESOURCE), opts)


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
    """CHAMP (package champ-dataset 1.0.0): plain ``text_field`` of the problem and of each solution step.
    ``path`` overrides the package file (for tests)."""
    opts = ReadOptions(allow_empty)

    def convert(obj):
        if not isinstance(obj, dict):
            raise Reject(f"record is not an object ({type(obj).__name__})")
        sid = obj.get("identifier") or obj.get("__key")
        if not isinstance(sid, str) or not sid.strip():
            raise Reject("missing field 'identifier'")
        return make_record("champ", sid.strip(), text_field(obj, "_text"),
                           [champ_solution_text(get_field(obj, "solution"))], optional_text(obj, "category"))

    return collect("champ", _champ_file(path or champ_path(), opts), convert, limit, opts)
