"""Fault cases of graded labels: a minimum grade gap of 0 (pairs of equal grades scored as if the
second candidate were better), and the judge-validation stage given grades that form no pair.

Old behaviour is given per test. The pair rules are checked in process on hand-made grades; the stage
runs as a real process on a copy of the tiny run.
"""
import json
from pathlib import Path

import polars as pl
import pytest

from conftest import copy_run, needs_data, saber_cli as saber
from saber_lib.validation import grades as gr

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "params" / "tiny.yaml"


def _grades(rows) -> pl.DataFrame:
    return pl.DataFrame(rows, schema={"query_id": pl.String, "doc_id": pl.String, "grade": pl.Float64}, orient="row")


# --------------------------------------------------------------------------- a gap of 0
@pytest.mark.parametrize("min_gap", [0.0, 0.5])
def test_equal_grades_never_form_a_pair_whatever_the_gap(min_gap):
    # old: with min_gap 0 the pair (d1, d2) graded 50 and 50 was kept, labelled "b" (the second
    # better): a judge answering "tie" there, the only right answer, was scored wrong
    g = _grades([("q", "d1", 50.0), ("q", "d2", 50.0), ("q", "d3", 80.0), ("q", "d4", 50.5)])
    pairs = gr.graded_pairs(g, ["q"], min_gap=min_gap, seed=0)
    got = {frozenset((a, b)) for a, b in pairs.select("a", "b").iter_rows()}
    # by hand: every two documents with different grades at least min_gap apart
    want = {frozenset(p) for p in [("d1", "d3"), ("d2", "d3"), ("d3", "d4"), ("d1", "d4"), ("d2", "d4")]}
    assert got == want
    for a, b, ga, gb, label in pairs.select("a", "b", "grade_a", "grade_b", "label").iter_rows():
        assert ga != gb and label == ("a" if ga > gb else "b")
    # a judge ordering every pair as the grades do is right on every pair (old: 5 of 6, 83.3%)
    verdicts = pairs["label"].to_list()
    t = gr.grade_agreement_table({"oracle": verdicts}, {}, pairs, g, ["q"], n_resamples=10, level=0.9, seed=0)
    assert t["pairwise_accuracy"].to_list() == [100.0] and t["n_pairs"].to_list() == [5]


def test_grades_equal_up_to_rounding_are_a_tie_too():
    # the mean of three annotators' 0, 0 and 8.4 is 2.8 in exact arithmetic, 2.8000000000000003 in
    # floats: the same grade as another candidate's 2.8
    rows = pl.DataFrame({"query_id": ["q"] * 4, "doc_id": ["d1", "d1", "d1", "d2"], "score": [0.0, 0.0, 8.4, 2.8]})
    g = gr.mean_grades(rows)
    assert g["grade"].to_list()[0] != 2.8
    assert gr.graded_pairs(g, ["q"], min_gap=0.0).height == 0


# --------------------------------------------------------------------------- the stage, no pair
@needs_data("sources")
@pytest.mark.pipeline
def test_the_stage_with_grades_that_form_no_pair_stops_with_one_line(tiny_full_run, tmp_path):
    # old: KeyError: '<doc id>' from the stage's notebook, after every candidate of the graded queries
    # was graded the same (no pair at least jv_grade_min_gap apart)
    run = copy_run(tiny_full_run[0], tmp_path / "run", without=("judge_validation",))   # evaluate done, the stage never run
    bench = pl.read_parquet(run / "select" / "benchmark.parquet")
    qs = sorted(bench["query_id"].unique())[:2]
    grades = tmp_path / "grades.jsonl"
    grades.write_text("".join(json.dumps({"query_id": q, "doc_id": c, "score": 60})
                              + "\n" for q in qs for c in bench.filter(pl.col("query_id") == q)["cand_id"]))
    r = saber("run", "judge_validation", "--params", TINY, "--run-dir", run, "--set",
              f"judge_validation.jv_grades={grades}", "--set", f"run.figures_dir={tmp_path / 'fig'}")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and "KeyError" not in r.stderr, r.stderr
    first = r.stderr.strip().splitlines()[0]
    assert str(grades) in first and "judge_validation.jv_grade_min_gap" in first and "no pair" in first, first
    assert not (run / "judge_validation" / "manifest.json").exists()
