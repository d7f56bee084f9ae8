"""Graded reference labels (validation.grades) and system-ranking fidelity (validation.fidelity), against
hand-computed cases and scipy."""
import json
import math

import numpy as np
import polars as pl
import pytest
from scipy import stats

from saber_lib.validation import fidelity
from saber_lib.validation import grades as gr


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def g(q, d, s, ann="a1", reason="r"):
    return {"query_id": q, "doc_id": d, "score": s, "annotator": ann, "reason": reason}


# ----------------------------------------------------------------------------- reading
def test_rows_of_one_pair_are_averaged_and_csv_reads_as_jsonl(tmp_path):
    rows = [g("q", "d1", 90), g("q", "d1", 70, "a2"), g("q", "d2", 10)]
    j = gr.read_grades(write_jsonl(tmp_path / "g.jsonl", rows))
    c = tmp_path / "g.csv"
    c.write_text("query_id,doc_id,score,annotator,reason\n" + "".join(f"q,{r['doc_id']},{r['score']},{r['annotator']},r\n"
                                                                    for r in rows))
    assert j.drop("line").equals(gr.read_grades(c).drop("line"))
    m = gr.mean_grades(j)
    assert dict(zip(m["doc_id"], m["grade"])) == {"d1": 80.0, "d2": 10.0}
    assert dict(zip(m["doc_id"], m["n_labels"])) == {"d1": 2, "d2": 1}


@pytest.mark.parametrize("bad, needle", [
    ({"query_id": "q", "doc_id": "d", "score": 101}, "line 2: score 101 is outside [0, 100]"),
    ({"query_id": "q", "doc_id": "d", "score": -1}, "line 2: score -1 is outside"),
    ({"query_id": "q", "doc_id": "d", "score": "high"}, "line 2: score 'high' is not a number"),
    ({"query_id": "q", "doc_id": "d", "score": True}, "line 2: score True is not a number"),
    ({"query_id": "q", "score": 5}, "line 2: missing field(s) doc_id"),
    ({"query_id": "q", "doc_id": "q", "score": 5}, "line 2: a query cannot grade itself"),
])
def test_a_bad_row_is_one_error_naming_file_and_line(tmp_path, bad, needle):
    p = write_jsonl(tmp_path / "g.jsonl", [g("q", "d0", 5), bad])
    with pytest.raises(gr.GradesFileError) as e:
        gr.read_grades(p)
    assert str(p) in str(e.value) and needle in str(e.value)


def test_nan_score_in_csv_and_duplicate_header_and_same_annotator_twice(tmp_path):
    c = tmp_path / "g.csv"
    c.write_text("query_id,doc_id,score\nq,d,nan\n")
    with pytest.raises(gr.GradesFileError, match=r"g\.csv, line 2: score 'nan' is outside"):
        gr.read_grades(c)
    c.write_text("query_id,doc_id,score,score\nq,d,5,7\n")
    with pytest.raises(gr.GradesFileError, match=r"g\.csv, line 1: the header names column 'score' twice"):
        gr.read_grades(c)
    p = write_jsonl(tmp_path / "g.jsonl", [g("q", "d", 5), g("q", "x", 5), g("q", "d", 7)])
    with pytest.raises(gr.GradesFileError, match=r"line 3: annotator 'a1' graded this pair already \(line 1\)"):
        gr.read_grades(p)
    with pytest.raises(gr.GradesFileError, match="not found"):
        gr.read_grades(tmp_path / "missing.jsonl")


def test_inter_annotator_spearman_is_scipys(tmp_path):
    a = [90, 50, 30, 10]
    b = [80, 60, 5, 20]
    rows = [g("q", f"d{i}", x) for i, x in enumerate(a)] + [g("q", f"d{i}", x, "a2") for i, x in enumerate(b)]
    t = gr.annotator_spearman(gr.read_grades(write_jsonl(tmp_path / "g.jsonl", rows)))
    assert t.height == 1 and t["n_docs"][0] == 4
    assert t["spearman"][0] == pytest.approx(stats.spearmanr(a, b).statistic)


# ----------------------------------------------------------------------------- pairs and agreement
def grades_frame(rows):
    return pl.DataFrame(rows, schema={"query_id": pl.String, "doc_id": pl.String, "grade": pl.Float64}, orient="row")


def test_graded_pairs_keep_pairs_min_gap_apart_with_the_better_graded_as_label():
    gf = grades_frame([("q", "d1", 90), ("q", "d2", 85), ("q", "d3", 50), ("q", "d4", 10)])
    p = gr.graded_pairs(gf, ["q"], min_gap=10, seed=3)
    got = {frozenset((a, b)) for a, b in p.select("a", "b").iter_rows()}
    assert got == {frozenset(x) for x in [("d1", "d3"), ("d1", "d4"), ("d2", "d3"), ("d2", "d4"), ("d3", "d4")]}
    for a, b, ga, gb, lab in p.select("a", "b", "grade_a", "grade_b", "label").iter_rows():
        assert lab == ("a" if ga > gb else "b")
    assert p.equals(gr.graded_pairs(gf, ["q"], min_gap=10, seed=3))          # seeded
    assert gr.graded_pairs(gf, ["q"], min_gap=10, per_query=2, seed=3).height == 2


def test_accuracy_counts_ties_as_wrong_and_spearman_is_the_mean_over_queries():
    gf = grades_frame([("q1", "a", 90), ("q1", "b", 60), ("q1", "c", 20),
                       ("q2", "x", 80), ("q2", "y", 40), ("q2", "z", 0)])
    pairs = gr.graded_pairs(gf, ["q1", "q2"], min_gap=10, seed=0)       # 3 pairs per query
    scores = {("q1", "a"): 3.0, ("q1", "b"): 1.0, ("q1", "c"): 1.0,     # b = c: a tie, counted wrong
              ("q2", "x"): 0.1, ("q2", "y"): 0.5, ("q2", "z"): 0.0}     # x < y: wrong
    t = gr.grade_agreement_table({}, {"m": scores}, pairs, gf, ["q1", "q2"], n_resamples=200, level=0.95, seed=0)
    row = t.row(0, named=True)
    # right: q1 (a,b) (a,c); q2 (x,z) (y,z) -> 4 of 6
    assert row["n_pairs"] == 6 and row["n_queries"] == 2
    assert row["pairwise_accuracy"] == pytest.approx(100 * 4 / 6)
    s1 = stats.spearmanr([3, 1, 1], [90, 60, 20]).statistic
    s2 = stats.spearmanr([0.1, 0.5, 0.0], [80, 40, 0]).statistic
    assert row["spearman"] == pytest.approx((s1 + s2) / 2)
    assert row["accuracy_ci_low"] <= row["pairwise_accuracy"] <= row["accuracy_ci_high"]
    # a verdict-only method: no spearman; failures leave their pairs out
    v = ["failure"] + [lab for lab in pairs["label"].to_list()[1:]]
    t2 = gr.grade_agreement_table({"v": v}, {}, pairs, gf, ["q1", "q2"], n_resamples=100, level=0.95, seed=0)
    assert t2["n_pairs"][0] == 5 and t2["pairwise_accuracy"][0] == 100.0 and t2["spearman"][0] is None


def test_covered_queries_need_every_candidate_graded():
    gf = grades_frame([("q1", "a", 1), ("q1", "b", 2), ("q2", "x", 3)])
    bench = pl.DataFrame({"query_id": ["q1", "q1", "q2", "q2", "q3"], "cand_id": ["a", "b", "x", "y", "k"]})
    assert gr.covered_queries(gf, bench) == (["q1"], ["q2"])


# ----------------------------------------------------------------------------- system fidelity
def _dcg(gains):
    return sum(gn / math.log2(i + 2) for i, gn in enumerate(gains))


def test_ndcg_under_the_grades_is_the_benchmarks_ndcg_of_grade_over_20():
    ratings = pl.DataFrame({"query_id": ["q"] * 3, "cand_id": ["a", "b", "c"], "position": [0, 1, 2],
                            "rating": [5.0, 0.0, 2.5]})
    gf = grades_frame([("q", "a", 40), ("q", "b", 100), ("q", "c", 0)])
    scores = pl.DataFrame({"retriever": ["r"] * 3, "setting": ["statement-full"] * 3, "query_id": ["q"] * 3,
                           "cand_id": ["a", "b", "c"], "score": [0.9, 0.5, 0.1]})       # ranks a, b, c
    pq = fidelity.ndcg_both_ways(scores, ratings, gf, ["q"], top=5.0, k=10)
    rel_ref = [2.0, 5.0, 0.0]                                                            # grade / 20
    want_ref = _dcg([2 ** r - 1 for r in rel_ref]) / _dcg(sorted([2 ** r - 1 for r in rel_ref], reverse=True))
    want_rat = _dcg([2 ** 5 - 1, 0, 2 ** 2.5 - 1]) / _dcg([2 ** 5 - 1, 2 ** 2.5 - 1, 0])
    assert pq["ndcg_reference"][0] == pytest.approx(want_ref)
    assert pq["ndcg_ratings"][0] == pytest.approx(want_rat)


def test_fidelity_tau_is_scipys_tau_b_of_the_mean_ndcgs_and_perfect_ratings_give_one():
    rng = np.random.default_rng(0)
    rows = []
    for s in range(5):
        for q in range(8):
            x = rng.random()
            rows.append((f"s{s}", "statement-full", f"q{q}", x + 0.1 * rng.random(), x + s * 0.05))
    pq = pl.DataFrame(rows, schema=["retriever", "setting", "query_id", "ndcg_ratings", "ndcg_reference"], orient="row")
    out = fidelity.fidelity_stats(pq, n_resamples=300, seed=1)
    t = fidelity.fidelity_table(pq)
    assert out["kendall_tau"] == pytest.approx(stats.kendalltau(t["ndcg_ratings"], t["ndcg_reference"]).statistic)
    assert out["spearman"] == pytest.approx(stats.spearmanr(t["ndcg_ratings"], t["ndcg_reference"]).statistic)
    assert out["n_systems"] == 5 and out["n_queries"] == 8
    assert out["ci_low"] <= out["ci_high"]
    same = fidelity.fidelity_stats(pq.with_columns(pl.col("ndcg_reference").alias("ndcg_ratings")), n_resamples=100)
    assert same["kendall_tau"] == pytest.approx(1.0) and same["ci_low"] == pytest.approx(1.0)
    assert out == fidelity.fidelity_stats(pq, n_resamples=300, seed=1)          # seeded


def test_rank_shift_is_the_mean_rank_under_the_grades_minus_under_the_ratings_and_a_clear_interval_names_a_system():
    # hand case, 3 systems x 3 queries; the grades rank s2, s1, s3 on every query; the ratings rank
    # q1: s1 s2 s3 (shifts s1 +1, s2 -1, s3 0), q2: s3 s2 s1 (-1, -1, +2), q3: s3 s1 s2 (0, -2, +2)
    rat = {"q1": (.9, .6, .3), "q2": (.5, .7, .8), "q3": (.4, .2, .6)}
    pq = pl.DataFrame([(f"s{i + 1}", "statement-full", q, rat[q][i], (.5, .6, .4)[i]) for q in rat for i in range(3)],
                      schema=["retriever", "setting", "query_id", "ndcg_ratings", "ndcg_reference"], orient="row")
    b = fidelity.system_bias(pq, n_resamples=400, seed=3)
    assert b["retriever"].to_list() == ["s3", "s1", "s2"]                       # most favoured first
    assert b["rank_shift"].to_list() == pytest.approx([4 / 3, 0.0, -4 / 3])
    assert b["queries_up"].to_list() == [2, 1, 0] and b["queries_down"].to_list() == [0, 1, 3]
    s3, s2 = b.row(0, named=True), b.row(2, named=True)
    # s2's shifts are -1, -1, -2: every resample mean is in [-2, -1]; s3's 0, 2, 2: in [0, 2]
    assert -2 <= s2["rank_shift_ci_low"] <= s2["rank_shift_ci_high"] == pytest.approx(-1)
    assert s3["rank_shift_ci_low"] == pytest.approx(0) and s3["rank_shift_ci_high"] == pytest.approx(2)
    out = fidelity.fidelity_stats(pq, n_resamples=400, seed=3)
    assert out["favoured"] == [] and out["disfavoured"] == ["s2"]          # s3's interval touches 0
    t = fidelity.fidelity_table(pq, n_resamples=400, seed=3)
    assert t.columns == list(fidelity.TABLE_SCHEMA)
    both = fidelity.fidelity_summary(pq, n_resamples=400, seed=3)      # the two at once, shifts computed once
    assert both[0] == out and both[1].equals(t)
    # the ratings demote the grades' best two (s1 by 3 ranks, s2 by 1): named most favoured first, in either call
    ref4, rat4 = {"s1": .9, "s2": .8, "s3": .5, "s4": .4}, {"s1": .1, "s2": .3, "s3": .7, "s4": .6}
    four = pl.DataFrame([(k, "statement-full", f"q{q}", rat4[k] + .01 * q * (k == "s1"), ref4[k]) for q in range(6) for k in ref4],
                        schema=pq.columns, orient="row")
    st4 = fidelity.fidelity_summary(four, n_resamples=200)[0]
    assert st4 == fidelity.fidelity_stats(four, n_resamples=200)
    assert st4["favoured"] == ["s3", "s4"] and st4["disfavoured"] == ["s2", "s1"]
    assert dict(zip(t["retriever"], t["rank_shift"])) == pytest.approx({"s1": 0.0, "s2": -4 / 3, "s3": 4 / 3})
    # ratings that order the systems as the grades on every query, however stretched, shift nothing
    same = pq.with_columns((3 * pl.col("ndcg_reference") - 1).alias("ndcg_ratings"))
    sb = fidelity.system_bias(same, n_resamples=100)
    assert sb["rank_shift"].to_list() == [0.0] * 3 and sb["queries_up"].to_list() == [0] * 3
    assert fidelity.fidelity_stats(same, n_resamples=100)["favoured"] == []
    # ties share the average rank: s1 and s2 tied under the ratings on one query
    tie = pl.DataFrame([("s1", "statement-full", "q", .5, .9), ("s2", "statement-full", "q", .5, .1)],
                       schema=pq.columns, orient="row")
    assert fidelity.system_bias(tie, n_resamples=0)["rank_shift"].to_list() == [0.5, -0.5]


def test_a_candidate_without_a_grade_is_an_error():
    ratings = pl.DataFrame({"query_id": ["q", "q"], "cand_id": ["a", "b"], "position": [0, 1], "rating": [1.0, 2.0]})
    with pytest.raises(ValueError, match="have no grade"):
        fidelity.reference_ratings(ratings, grades_frame([("q", "a", 3)]), ["q"], 5.0)


def test_the_grade_judge_orders_pairs_by_grade_and_ties_equal_grades():
    judge = fidelity.GradeJudge({("q", "a"): 90.0, ("q", "b"): 40.0, ("q", "c"): 40.0})
    assert judge.judge_pairs([("q", "a", "b"), ("q", "b", "a"), ("q", "b", "c")]) == [1, 2, 0]
