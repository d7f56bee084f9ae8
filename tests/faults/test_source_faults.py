"""Fault cases of sources: files that lose records silently, and non-UTF-8
files: hand-made source files in a temporary data directory, loaded by the real loaders and the
real corpus build, which must reconcile raw = kept + duplicates + quarantined.
"""
import json

import pytest

from saber_lib.corpus import build_corpus
from saber_lib.corpus.readers import SourceFileError
from saber_lib.corpus.loaders import load_source
from saber_lib.core.data import NotUTF8, read_text

HEADER = "Problem ID,Problem,Solution,Grading guidelines,Category,Level,Short Answer,Source\n"
IMO = "sources/imo_proofbench/proofbench_v2.csv"
MATH = "sources/math/math.jsonl"


def _row(i, problem=None, solution=None):
    problem = problem or f"Show that {i} + {i} = {2 * i} for the integer {i}."
    solution = solution or f"Add {i} to itself and count to {2 * i}."
    return f'PB-{i},"{problem}","{solution}",g,Algebra,IMO-easy,,src\n'


@pytest.fixture
def data(tmp_path):
    for rel in (IMO, MATH):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
    return tmp_path


def _params(sources, **kw):
    return dict(sources=sources, max_records_per_source=0, shingle_size=5, minhash_bands=14,
                minhash_rows=8, minhash_seed=1, near_dup_threshold=0.5, near_dup_number_check=True, **kw)


def _reconciles(report):
    for src, row in report["per_source"].items():
        assert row["raw"] == row["kept"] + row["removed_as_duplicate"] + row["quarantined"], (src, row)


# --------------------------------------------------------------------------- empty files
@pytest.mark.parametrize("rel, content", [
    (MATH, ""), (MATH, "\n\n  \n"), (IMO, ""), (IMO, HEADER)])
def test_empty_source_file_is_an_error_naming_it(data, rel, content):
    # old: 0 records, exit 0
    (data / rel).write_text(content)
    src = "math" if rel == MATH else "imo_proofbench"
    with pytest.raises(SourceFileError) as e:
        build_corpus(data, _params([src]))
    assert str(data / rel) in str(e.value) and "empty source file" in str(e.value)
    assert "corpus.allow_empty_sources" in str(e.value)


def test_empty_source_allowed_by_the_profile_is_a_recorded_zero(data):
    (data / MATH).write_text("")
    (data / IMO).write_text(HEADER + _row(1))
    res = build_corpus(data, _params(["imo_proofbench", "math"], allow_empty_sources=True))
    assert res.report["per_source"]["math"]["raw"] == 0
    assert res.report["per_source"]["math"]["notes"] == {"empty_files": [MATH]}
    assert res.report["params"]["allow_empty_sources"] is True
    assert res.corpus.height == 1
    _reconciles(res.report)


def test_empty_json_array_is_an_error(tmp_path):
    (tmp_path / "sources/aime").mkdir(parents=True)
    (tmp_path / "sources/aime/aime.json").write_text("[]")
    (tmp_path / "sources/aime/aops_subject_labels.jsonl").write_text('{"uid": "x", "subject": "Algebra"}\n')
    with pytest.raises(SourceFileError, match="aime.json: empty source file"):
        load_source("aime", tmp_path)


# --------------------------------------------------------------------------- CSV damage
def test_stray_quote_is_quarantined_not_kept_with_shifted_columns(data):
    # old: the stray quote closed the Problem field early; the row was kept with its solution "y"
    bad = 'PB-2,"Find x such that "x" is y",y,g,Algebra,IMO-easy,,src\n'
    (data / IMO).write_text(HEADER + _row(1) + bad + _row(3))
    ld = load_source("imo_proofbench", data)
    assert [r["source_id"] for r in ld.records] == ["PB-1", "PB-3"]
    assert ld.raw == 3 and len(ld.quarantine) == 1
    q = ld.quarantine[0]
    assert q["file"] == IMO and q["record"] == "row 2 (line 3)" and "broken quoting at line 3" in q["reason"]


def test_wrong_field_count_is_quarantined_with_line(data):
    # old: a row with an extra field was kept (the extra under the key None); a short one became
    # "missing field" or was kept with the last columns empty
    extra = 'PB-2,"Problem two, long enough.","Solution two.",g,Algebra,IMO-easy,,src,EXTRA\n'
    short = 'PB-3,"Problem three.","Solution three.",g\n'
    (data / IMO).write_text(HEADER + _row(1) + extra + short + _row(4))
    ld = load_source("imo_proofbench", data)
    assert [r["source_id"] for r in ld.records] == ["PB-1", "PB-4"]
    assert [(q["record"], q["reason"]) for q in ld.quarantine] == [
        ("row 2 (line 3)", "row has 9 fields, the header has 8"),
        ("row 3 (line 4)", "row has 4 fields, the header has 8")]


def test_row_cut_inside_a_quoted_field_is_quarantined(data):
    # old: kept with the solution cut short ("Add 2 to its")
    text = HEADER + _row(1) + _row(2)
    cut = text[: text.rindex("to itself") + len("to its")]
    (data / IMO).write_text(cut)
    ld = load_source("imo_proofbench", data)
    assert [r["source_id"] for r in ld.records] == ["PB-1"]
    assert ld.raw == 2
    assert ld.quarantine[0]["record"] == "row 2 (line 3)"
    assert "unterminated quote" in ld.quarantine[0]["reason"]


def test_row_cut_in_its_last_unquoted_field_is_quarantined(data):
    # old: kept with Source "sr" (the file ended mid-field, no line end)
    (data / IMO).write_text(HEADER + _row(1) + _row(2)[:-2])
    ld = load_source("imo_proofbench", data)
    assert [r["source_id"] for r in ld.records] == ["PB-1"]
    assert "row cut short" in ld.quarantine[0]["reason"] and ld.quarantine[0]["record"] == "row 2 (line 3)"


def test_unterminated_quote_in_a_multiline_record_names_the_lines(data):
    open_quote = 'PB-2,"Problem two\nspans lines,Solution\n'
    (data / IMO).write_text(HEADER + _row(1) + open_quote + "more text\n")
    ld = load_source("imo_proofbench", data)
    assert [r["source_id"] for r in ld.records] == ["PB-1"]
    assert ld.quarantine[0]["record"] == "row 2 (lines 3-5)"
    assert "unterminated quote" in ld.quarantine[0]["reason"]


def test_quoting_error_inside_a_multiline_record_quarantines_the_fragments_too(data):
    broken = 'PB-2,"Problem two\nspans lines,"Solution two\nstill the solution",g,Algebra,IMO-easy,,src\n'
    (data / IMO).write_text(HEADER + _row(1) + broken + _row(3))
    ld = load_source("imo_proofbench", data)
    assert [r["source_id"] for r in ld.records] == ["PB-1", "PB-3"]
    assert [q["record"] for q in ld.quarantine] == ["row 2 (lines 3-4)", "row 3 (line 5)"]
    assert ld.raw == len(ld.records) + len(ld.quarantine)


def test_reconciliation_holds_with_every_kind_of_damage(data):
    rows = [_row(1), 'PB-2,"Find "x" here",y,g,Algebra,IMO-easy,,src\n', _row(3),
            'PB-4,"p","s",g\n', _row(1)]  # PB-1 twice: a repeated id
    (data / IMO).write_text(HEADER + "".join(rows) + _row(6)[:40])
    lines = [{"id": f"m{i}", "problem": f"Compute the sum of {i} and {i + 7} please.",
              "solution": f"It is {2 * i + 7}.", "type": "Algebra", "level": "Level 1"} for i in range(4)]
    lines.append(dict(lines[0], id="m9"))  # exact duplicate within the source
    (data / MATH).write_text("\n".join(json.dumps(x) for x in lines) + "\n{\"id\": \"cut")
    res = build_corpus(data, _params(["imo_proofbench", "math"]))
    _reconciles(res.report)
    imo, math = res.report["per_source"]["imo_proofbench"], res.report["per_source"]["math"]
    assert (imo["raw"], imo["kept"], imo["quarantined"]) == (6, 2, 4)
    assert (math["raw"], math["kept"], math["removed_as_duplicate"], math["quarantined"]) == (6, 4, 1, 1)
    q = res.quarantine.filter(res.quarantine["source"] == "imo_proofbench")
    assert all(r.startswith("row ") and "line" in r for r in q["record"].to_list())
    assert set(q["file"].to_list()) == {IMO}


def test_a_clean_csv_with_multiline_quoted_fields_loads_whole(data):
    (data / IMO).write_text(HEADER + _row(1, problem="Line one,\nline two.") + _row(2, solution='He said ""hi"".'))
    ld = load_source("imo_proofbench", data)
    assert ld.quarantine == [] and [r["problem"] for r in ld.records][0] == "Line one,\nline two."
    assert ld.records[1]["solution"] == 'He said "hi".'


# --------------------------------------------------------------------------- non-UTF-8
def test_non_utf8_csv_names_file_and_byte_offset(data):
    # old: a bare UnicodeDecodeError (no file, no line)
    raw = (HEADER + _row(1)).encode() + b"PB-2,\"caf\xe9\",\"s\",g,Algebra,IMO-easy,,src\n"
    (data / IMO).write_bytes(raw)
    with pytest.raises(SourceFileError) as e:
        load_source("imo_proofbench", data)
    off = raw.index(b"\xe9")
    assert str(data / IMO) in str(e.value) and f"byte offset {off}" in str(e.value) and "line 3" in str(e.value)


def test_read_text_helper(tmp_path):
    p = tmp_path / "run.trec"
    p.write_bytes(b"q1 Q0 d1 1 2.0 x\nq2 Q0 \xff\xfe 1 1.0 x\n")
    with pytest.raises(NotUTF8) as e:
        read_text(p)
    assert str(e.value).startswith(f"{p}: not UTF-8 text: byte 0xff at byte offset 23 (line 2)")
    p.write_bytes("\ufeffq1 Q0 d1 1 2.0 x\n".encode())
    assert read_text(p).startswith("q1")


def test_non_utf8_line_of_a_jsonl_is_quarantined_with_its_line(data):
    (data / MATH).write_bytes(b'{"id": "a", "problem": "p one two", "solution": "s"}\n'
                              b'{"id": "b", "problem": "caf\xe9", "solution": "s"}\n')
    ld = load_source("math", data)
    assert ld.raw == 2 and ld.quarantine[0]["record"] == "line 2" and "UTF-8" in ld.quarantine[0]["reason"]
