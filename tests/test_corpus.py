"""Corpus loaders, validation/quarantine and the whole build, on small source files written here.

Every source gets a fixture with good records and broken ones (bad JSON, bad UTF-8, empty
solution, missing field, repeated id); the expected records and counts are written out by hand.
"""
import hashlib
import io
import json
import zipfile

import polars as pl
import pytest

from saber_lib.core.config_types import ProfileError
from saber_lib.core.config import load_profile
from saber_lib.corpus import build_corpus, load_source, write_outputs
from saber_lib.corpus.readers import SourceFileError
from saber_lib.corpus.loaders import aime_uid, load_champ, omni_subject
from saber_lib.corpus.schema import CORPUS_SCHEMA, source_domain

PARAMS = {"sources": ["imo_proofbench", "harp_proof", "aime", "olympiadbench", "omni_math_rule",
                      "math", "proofnet", "minif2f"],
          "max_records_per_source": 0, "shingle_size": 5, "minhash_bands": 14, "minhash_rows": 8,
          "minhash_seed": 1, "near_dup_threshold": 0.5, "near_dup_number_check": True}

AIME_Q = ("Find the number of ordered pairs of positive integers $(m,n)$ such that $m^2n = 20^{20}$ "
          "and both $m$ and $n$ are perfect squares or perfect cubes of integers.")


def _jl(rows) -> bytes:
    out = []
    for r in rows:
        out.append(r if isinstance(r, bytes) else json.dumps(r).encode())
    return b"\n".join(out) + b"\n"


@pytest.fixture
def data_dir(tmp_path):
    s = tmp_path / "sources"
    for d in ("imo_proofbench", "harp_proof", "aime", "olympiadbench", "omni_math_rule", "math",
              "proofnet", "minif2f"):
        (s / d).mkdir(parents=True)
    # IMO-ProofBench: 4 rows; row 2 has an empty solution, row 4 is cut short (no Solution column)
    (s / "imo_proofbench" / "proofbench_v2.csv").write_text(
        "Problem ID,Problem,Solution,Grading guidelines,Category,Level,Short Answer,Source\n"
        'PB-1,"Prove that $1+1=2$.\nUse axioms.",By definition.,g,Algebra,IMO-easy,,x\n'
        "PB-2,Show that a triangle has three sides.,,g,Geometry,pre-IMO,,x\n"
        "PB-3,Count the subsets of a 3-set.,There are $2^3=8$.,g,Combinatorics,IMO-medium,,x\n"
        "PB-4,Cut short\n", encoding="utf-8")
    # HARP: zip of JSON lines; line 2 bad JSON, line 3 empty solutions, line 4 missing problem
    harp = _jl([
        {"year": "1990", "contest": "USAMO", "number": "2", "level": "7", "subject": "number_theory",
         "problem": "Prove there are infinitely many primes.", "solution_1": "Euclid.",
         "solution_2": "Fermat numbers.", "solution_3": "", "solution_4": "Furstenberg."},
        b'{"year": "1991", "contest": "USAMO", "number": ',
        {"year": "1992", "contest": "USAMO", "number": "1", "subject": "algebra",
         "problem": "Find x.", "solution_1": "   ", "solution_2": ""},
        {"year": "1993", "contest": "USAJMO", "number": "3", "subject": "geometry", "solution_1": "s"},
    ])
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("HARP_proof-based.jsonl", harp)
    (s / "harp_proof" / "HARP_proof-based.jsonl.zip").write_bytes(buf.getvalue())
    # AIME: JSON array; the 4th entry has no solution
    (s / "aime" / "aime.json").write_text(json.dumps([
        {"problem": "What is $1+2$?", "solution": "3.", "answer": "3", "year": 1985,
         "aime_number": 1, "problem_number": 3, "difficulty": 2.0},
        {"problem": AIME_Q, "solution": "Count the exponents.", "answer": "12", "year": 2005,
         "aime_number": 2, "problem_number": 7, "difficulty": 4.0},
        {"problem": "The last problem of 2023 AIME I.", "solution": "349.", "answer": "349",
         "year": 2023, "aime_number": 1, "problem_number": 0, "difficulty": 6.0},
        {"problem": "No solution here.", "answer": "1", "year": 2001, "aime_number": 1,
         "problem_number": 1, "difficulty": 1.0},
    ]))
    (s / "aime" / "aops_subject_labels.jsonl").write_bytes(_jl([
        {"uid": "1985/AIME/3", "subject": "prealgebra", "notes": ""},
        {"uid": "2005/AIME_II/7", "subject": "number_theory", "notes": ""},
        b"not json",
        {"uid": "2023/AIME_I/15", "subject": "geometry", "notes": ""},
    ]))
    # OlympiadBench: two alternative solutions; a solution that is a number; a blank line
    (s / "olympiadbench" / "test.jsonl").write_bytes(_jl([
        {"id": 1606, "subfield": "Combinatorics", "context": None, "question": "How many moves?",
         "solution": ["Two moves.", "Another way: two."], "final_answer": ["2"]},
        b"   ",
        {"id": 1607, "subfield": "Algebra", "context": None, "question": "Solve.", "solution": 5},
    ]))
    # Omni-MATH: no ids (line numbers); line 2 bad UTF-8, line 3 not an object, line 5 no domain
    (s / "omni_math_rule" / "omni_math_rule.jsonl").write_bytes(_jl([
        {"domain": ["Mathematics -> Algebra -> Intermediate Algebra -> Inequalities",
                    "Mathematics -> Discrete Mathematics -> Algorithms"], "difficulty": 8.0,
         "problem": "Prove AM-GM.", "solution": "Jensen.", "answer": "", "source": "x"},
        b'{"problem": "\xff\xfe"}',
        b"[1, 2, 3]",
        {"domain": ["Mathematics -> Applied Mathematics -> Statistics -> Probability"],
         "difficulty": 3.0, "problem": "Flip two coins.", "solution": "1/4.", "source": "x"},
        {"domain": [], "difficulty": 5.0, "problem": "A golden-ratio string problem.",
         "solution": "Count.", "source": "x"},
    ]))
    # MATH: line 2 repeats line 1 up to case and spacing; line 4 repeats the id of line 3
    (s / "math" / "math.jsonl").write_bytes(_jl([
        {"problem": "Compute $2+2$.", "level": "Level 1", "type": "Prealgebra", "solution": "4",
         "split": "test", "subject_dir": "prealgebra", "id": "test/prealgebra/1.json"},
        {"problem": "compute  $2+2$.", "level": "Level 1", "type": "Prealgebra", "solution": "Four",
         "split": "train", "subject_dir": "prealgebra", "id": "train/prealgebra/9.json"},
        {"problem": "Find $\\sin 0$.", "level": "Level 2", "type": "Precalculus", "solution": "0",
         "split": "test", "subject_dir": "precalculus", "id": "test/precalculus/5.json"},
        {"problem": "Another.", "level": "Level 2", "type": "Geometry", "solution": "x",
         "split": "test", "subject_dir": "geometry", "id": "test/precalculus/5.json"},
    ]))
    # ProofNet: valid then test; the test line has an empty proof
    (s / "proofnet" / "valid.jsonl").write_bytes(_jl([
        {"id": "Rudin|exercise_1_1a", "nl_statement": "If $r$ is rational, $r+x$ is irrational.",
         "nl_proof": "\\begin{proof}\n Suppose not.\n\\end{proof}", "formal_statement": "t"},
        {"id": "Munkres|exercise_2", "nl_statement": "A topology.", "nl_proof": "Open sets.",
         "formal_statement": "t"},
    ]))
    (s / "proofnet" / "test.jsonl").write_bytes(_jl([
        {"id": "Artin|exercise_3", "nl_statement": "A group.", "nl_proof": "", "formal_statement": "t"},
    ]))
    # miniF2F: restates the AIME problem above (with the answer appended); one missing statement
    (s / "minif2f" / "informal.jsonl").write_bytes(_jl([
        {"problem_name": "mathd_algebra_7", "informal_statement": "What is $3+4$? Show that it is 7.",
         "informal_proof": "Add.", "split": "test"},
        {"problem_name": "aimeII_2005_p7", "informal_statement": AIME_Q + " Show that it is 12.",
         "informal_proof": "Exponents.", "split": "valid"},
        {"problem_name": "induction_1", "informal_proof": "Induct.", "split": "valid"},
    ]))
    return tmp_path


# ----------------------------------------------------------------------------- loaders
def test_imo_proofbench_loader_quarantines_empty_solution_and_short_row(data_dir):
    ld = load_source("imo_proofbench", data_dir)
    assert ld.raw == 4
    assert [r["source_id"] for r in ld.records] == ["PB-1", "PB-3"]
    r = ld.records[0]
    assert r["doc_id"] == "imo_proofbench:PB-1"
    assert r["problem"] == "Prove that $1+1=2$.\nUse axioms."  # quoted multi-line field
    assert (r["source_subject"], r["source_level"], r["source_domain"]) == ("Algebra", "IMO-easy", "Algebra")
    assert [(q["record"], q["reason"]) for q in ld.quarantine] == [
        ("row 2 (line 4)", "empty solution"), ("row 4 (line 6)", "row has 2 fields, the header has 8")]


def test_harp_loader_splits_solutions_and_quarantines(data_dir):
    ld = load_source("harp_proof", data_dir)
    assert ld.raw == 4 and len(ld.records) == 1
    r = ld.records[0]
    assert r["source_id"] == "1990/USAMO/2"
    assert r["solution"] == "Euclid."
    assert r["extra_solutions"] == ["Fermat numbers.", "Furstenberg."]
    assert (r["source_subject"], r["source_domain"], r["source_level"]) == ("number_theory", "Number Theory", "7")
    reasons = {q["record"]: q["reason"] for q in ld.quarantine}
    assert reasons["line 2"].startswith("undecodable line (JSON")
    assert reasons["line 3"] == "empty solution"
    assert reasons["line 4"] == "missing field 'problem'"
    assert all(q["file"].endswith("HARP_proof-based.jsonl") for q in ld.quarantine)


def test_aime_uid_rules():
    assert aime_uid(1985, 1, 3) == "1985/AIME/3"
    assert aime_uid(2005, 2, 7) == "2005/AIME_II/7"
    assert aime_uid(2010, 1, 12) == "2010/AIME_I/12"
    assert aime_uid(2023, 2, 0) == "2023/AIME_II/15"


def test_aime_loader_matches_subject_labels_by_uid(data_dir):
    ld = load_source("aime", data_dir)
    assert ld.raw == 4
    got = {r["source_id"]: (r["source_subject"], r["source_domain"]) for r in ld.records}
    assert got == {"1985/AIME/3": ("prealgebra", "Algebra"),
                   "2005/AIME_II/7": ("number_theory", "Number Theory"),
                   "2023/AIME_I/15": ("geometry", "Geometry")}
    assert ld.records[1]["source_level"] == "4.0"
    assert [(q["record"], q["reason"]) for q in ld.quarantine] == [("index 3", "missing field 'solution'")]
    assert ld.notes == {"label_lines_unreadable": 1, "records_without_label": 0}


def test_olympiadbench_loader(data_dir):
    ld = load_source("olympiadbench", data_dir)
    assert ld.raw == 2  # the blank line is not a record
    (r,) = ld.records
    assert (r["doc_id"], r["solution"], r["extra_solutions"]) == ("olympiadbench:1606", "Two moves.",
                                                                  ["Another way: two."])
    assert r["source_domain"] == "Combinatorics"
    assert ld.quarantine[0]["reason"] == "field 'solution' is not a list (int)"


def test_omni_loader_ids_subjects_and_bad_lines(data_dir):
    ld = load_source("omni_math_rule", data_dir)
    assert ld.raw == 5
    assert [r["source_id"] for r in ld.records] == ["1", "4", "5"]
    a, b, c = ld.records
    assert a["source_subject"] == "Algebra > Intermediate Algebra > Inequalities; Discrete Mathematics > Algorithms"
    assert a["source_domain"] == "Algebra" and a["source_level"] == "8.0"
    assert (b["source_domain"], c["source_subject"], c["source_domain"]) == ("Combinatorics", None, None)
    reasons = [q["reason"] for q in ld.quarantine]
    assert reasons[0].startswith("undecodable line (UTF-8") and reasons[1] == "line is not a JSON object (list)"


def test_omni_subject_text():
    assert omni_subject(["Mathematics -> Geometry -> Plane Geometry"]) == "Geometry > Plane Geometry"
    assert omni_subject([]) is None


def test_math_loader_and_repeated_id(data_dir):
    ld = load_source("math", data_dir)
    assert ld.raw == 4 and len(ld.records) == 3
    assert ld.records[2]["source_domain"] == "Calculus and Analysis"  # Precalculus
    assert ld.records[0]["source_domain"] == "Algebra"  # Prealgebra
    (q,) = ld.quarantine
    assert q["record"] == "line 4" and q["reason"].startswith("duplicate source id 'test/precalculus/5.json'")


def test_proofnet_loader_reads_both_files_and_strips_proof_env(data_dir):
    ld = load_source("proofnet", data_dir)
    assert ld.raw == 3
    r, m = ld.records
    assert r["doc_id"] == "proofnet:Rudin|exercise_1_1a" and r["solution"] == "Suppose not."
    assert (r["source_subject"], r["source_domain"]) == ("Rudin", "Calculus and Analysis")
    assert (m["source_subject"], m["source_domain"]) == ("Munkres", None)
    assert ld.quarantine == [{"source": "proofnet", "file": "sources/proofnet/test.jsonl",
                              "record": "line 1", "reason": "empty solution"}]


def test_minif2f_loader(data_dir):
    ld = load_source("minif2f", data_dir)
    assert ld.raw == 3
    a, b = ld.records
    assert (a["source_subject"], a["source_domain"]) == ("algebra", "Algebra")
    assert (b["source_subject"], b["source_domain"]) == (None, None)
    assert a["problem"] == "What is $3+4$? Show that it is 7."  # the text itself is kept as is
    assert ld.quarantine[0]["reason"] == "missing field 'informal_statement'"


def test_champ_loader_on_a_fixture(tmp_path):
    p = tmp_path / "v0.json"
    p.write_text(json.dumps({"problems": {
        "P_Sequence_1": {"identifier": "P_Sequence_1", "_text": "Find a_5 if a_n = 2a_(n-1), a_1 = 1.",
                         "category": "Sequence",
                         "solution": {"steps": [{"_text": "a_n = 2^(n-1)."}, {"_text": " "},
                                                {"_text": "So a_5 = 16."}]}},
        "P_Number-Theory_2": {"identifier": "P_Number-Theory_2", "_text": "Is 7 prime?",
                              "category": "Number-Theory", "solution": {"steps": []}},
        "P_Polynomial_3": {"identifier": "P_Polynomial_3", "category": "Polynomial",
                           "solution": {"steps": [{"_text": "x"}]}},
    }, "concepts": {}, "hints": {}}))
    ld = load_champ(limit=0, path=p)
    assert ld.raw == 3
    (r,) = ld.records
    assert r["solution"] == "a_n = 2^(n-1).\nSo a_5 = 16."
    assert (r["source_subject"], r["source_domain"], r["source_level"]) == ("Sequence", "Algebra", None)
    assert [q["reason"] for q in ld.quarantine] == ["empty solution", "missing field '_text'"]
    assert ld.quarantine[0]["record"] == "problem P_Number-Theory_2"


def test_champ_loader_on_the_installed_package():
    pytest.importorskip("champ_dataset")
    ld = load_source("champ", None)
    assert ld.raw == 270 and not ld.quarantine
    r = ld.records[0]
    assert "@@" not in r["problem"] and "\n" in r["solution"]
    assert {x["source_domain"] for x in ld.records} == {"Algebra", "Number Theory", "Combinatorics"}


def test_limit_takes_the_first_raw_records_bad_ones_included(data_dir):
    ld = load_source("harp_proof", data_dir, limit=2)
    assert ld.raw == 2 and len(ld.records) == 1 and len(ld.quarantine) == 1
    ld = load_source("proofnet", data_dir, limit=2)  # both from valid.jsonl
    assert [r["source_id"] for r in ld.records] == ["Rudin|exercise_1_1a", "Munkres|exercise_2"]


def test_missing_file_names_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="sources/math/math.jsonl"):
        load_source("math", tmp_path)


def test_unreadable_json_array_names_the_file(data_dir):
    (data_dir / "sources" / "aime" / "aime.json").write_text("[{")
    with pytest.raises(SourceFileError, match="aime.json"):
        load_source("aime", data_dir)


def test_source_domain_table():
    assert source_domain("math", "Counting & Probability") == "Combinatorics"
    assert source_domain("math", "Intermediate Algebra") == "Algebra"
    assert source_domain("olympiadbench", "Number Theory") == "Number Theory"
    assert source_domain("imo_proofbench", "Number theory") == "Number Theory"
    assert source_domain("proofnet", "Dummit-Foote") == "Algebra"
    assert source_domain("proofnet", "Ireland-Rosen") == "Number Theory"
    assert source_domain("proofnet", "Putnam") is None
    assert source_domain("omni_math_rule", "Applied Mathematics > Math Word Problems") is None
    assert source_domain("omni_math_rule", "Precalculus > Functions") == "Calculus and Analysis"
    assert source_domain("champ", "Number-Theory") == "Number Theory"
    assert source_domain("harp_proof", None) is None


# ----------------------------------------------------------------------------- the build
# Hand-computed: raw, quarantined, exact duplicates, near duplicates, kept per source.
EXPECTED = {
    "imo_proofbench": (4, 2, 0, 0, 2),
    "harp_proof": (4, 3, 0, 0, 1),
    "aime": (4, 1, 0, 0, 3),
    "olympiadbench": (2, 1, 0, 0, 1),
    "omni_math_rule": (5, 2, 0, 0, 3),
    "math": (4, 1, 1, 0, 2),
    "proofnet": (3, 1, 0, 0, 2),
    "minif2f": (3, 1, 0, 1, 1),  # aimeII_2005_p7 restates aime:2005/AIME_II/7
}


def test_build_counts_reconcile_per_source(data_dir):
    res = build_corpus(data_dir, PARAMS)
    per = res.report["per_source"]
    for s, (raw, quar, exact, near, kept) in EXPECTED.items():
        row = per[s]
        assert (row["raw"], row["quarantined"], row["exact_duplicates"], row["near_duplicates"],
                row["kept"]) == (raw, quar, exact, near, kept), s
        assert row["raw"] == row["kept"] + row["removed_as_duplicate"] + row["quarantined"]
    assert res.report["total"]["raw"] == sum(v[0] for v in EXPECTED.values())
    # the tables agree with the report
    assert res.corpus.height == res.report["total"]["kept"]
    assert res.quarantine.height == res.report["total"]["quarantined"]
    assert res.dedup_log.height == res.report["total"]["removed_as_duplicate"]
    assert res.corpus["doc_id"].n_unique() == res.corpus.height
    assert dict(res.corpus.schema) == CORPUS_SCHEMA


def test_build_logs_the_removed_records(data_dir):
    res = build_corpus(data_dir, PARAMS)
    log = {r["removed_id"]: r for r in res.dedup_log.to_dicts()}
    assert log["math:train/prealgebra/9.json"]["kept_id"] == "math:test/prealgebra/1.json"
    assert log["math:train/prealgebra/9.json"]["rule"] == "exact-within-source"
    near = log["minif2f:aimeII_2005_p7"]
    assert (near["kept_id"], near["rule"]) == ("aime:2005/AIME_II/7", "near-cross-source")
    assert near["similarity"] >= PARAMS["near_dup_threshold"]
    kept = set(res.corpus["doc_id"].to_list())
    assert set(res.dedup_log["kept_id"].to_list()) <= kept
    assert not set(res.dedup_log["removed_id"].to_list()) & kept
    assert res.report["duplicates_by_source_pair"] == [
        {"rule": "exact-within-source", "removed_source": "math", "kept_source": "math", "n": 1},
        {"rule": "near-cross-source", "removed_source": "minif2f", "kept_source": "aime", "n": 1}]


def test_build_is_deterministic_byte_for_byte(data_dir, tmp_path):
    a = write_outputs(build_corpus(data_dir, PARAMS), tmp_path / "a")
    b = write_outputs(build_corpus(data_dir, PARAMS), tmp_path / "b")
    for name in a:
        assert hashlib.sha256(a[name].read_bytes()).digest() == hashlib.sha256(b[name].read_bytes()).digest()
    back = pl.read_parquet(a["corpus.parquet"])
    assert back["extra_solutions"].dtype == pl.List(pl.Utf8)
    assert "timings" not in json.loads(a["report.json"].read_text())


def test_build_respects_the_source_list_and_cap(data_dir):
    res = build_corpus(data_dir, {**PARAMS, "sources": ["math", "harp_proof"], "max_records_per_source": 1})
    assert res.report["sources"] == ["math", "harp_proof"]
    assert res.corpus["doc_id"].to_list() == ["math:test/prealgebra/1.json", "harp_proof:1990/USAMO/2"]
    assert {s: r["raw"] for s, r in res.report["per_source"].items()} == {"math": 1, "harp_proof": 1}


def test_build_rejects_bad_params(data_dir):
    with pytest.raises(KeyError, match="corpus.near_dup_threshold"):
        build_corpus(data_dir, {k: v for k, v in PARAMS.items() if k != "near_dup_threshold"})
    with pytest.raises(ValueError, match="corpus.sources"):
        build_corpus(data_dir, {**PARAMS, "sources": ["math", "nope"]})


def test_profile_checks_the_corpus_keys(project_root, tmp_path):
    prof = load_profile(project_root / "params" / "paper.yaml")
    assert prof.section("corpus")["near_dup_threshold"] == 0.5
    with pytest.raises(ProfileError, match="corpus.near_dup_threshold"):
        load_profile(project_root / "params" / "paper.yaml", {"corpus.near_dup_threshold": 1.5})


# ----------------------------------------------------------------------------- notebook views
def test_views_on_the_fixture_build(data_dir):
    from saber_lib.core.config import DOMAINS
    from saber_lib.corpus import views

    res = build_corpus(data_dir, PARAMS)
    counts = views.counts_table(res.report)
    assert counts["source"].to_list() == PARAMS["sources"] + ["total"]
    body, total = counts.head(-1), counts.tail(1)
    for col in ("raw", "quarantined", "exact_duplicates", "near_duplicates", "kept"):
        assert total[col].item() == body[col].sum()
    ex = views.duplicate_examples(res.dedup_log, res.corpus, n=1, seed=0)
    assert ex.height == 1 and ex.equals(views.duplicate_examples(res.dedup_log, res.corpus, n=1, seed=0))
    near = views.duplicate_examples(res.dedup_log, res.corpus, n=5, seed=0, rule="near-cross-source")
    assert near.select("removed_id", "kept_id").row(0) == ("minif2f:aimeII_2005_p7", "aime:2005/AIME_II/7")
    assert near["kept_problem"].item() == AIME_Q
    dom = views.domain_counts(res.corpus, PARAMS["sources"], DOMAINS)
    assert dom.filter(pl.col("source") == "omni_math_rule").select("Algebra", "Combinatorics", "unmapped").row(0) == (1, 1, 1)
    assert dom.drop("source").sum_horizontal().to_list() == [res.report["per_source"][s]["kept"] for s in PARAMS["sources"]]
    ls = views.length_summary(res.corpus, PARAMS["sources"])
    assert ls.filter(pl.col("source") == "harp_proof")["with_extra_solutions"].item() == 1
    subj = views.top_subjects(res.corpus, n=50)
    assert ("omni_math_rule", "Algebra", 1) in subj.rows()
