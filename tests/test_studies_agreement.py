"""Judge validation: agreement scoring with ties, pair sampling, the annotation store and tool."""
import json

import numpy as np
import polars as pl
import pytest

from saber_lib.validation import annotate_ui
from saber_lib.validation.annotate_ui import AnnotationStore, AnnotationTool, load_annotations
from saber_lib.studies.ablation import final_ranks
from saber_lib.validation.agreement import (agreement, agreement_by_delta, agreement_scores, rank_gap_agreement_table,
                                         inter_annotator, judge_labels, label_from_scores, labels_from_ratings,
                                         sample_ranked_pairs)


def test_agreement_scores_with_ties():
    x = ["a", "a", "tie", "b", "tie", "a", None, "failure"]
    y = ["a", "b", "a", "tie", "tie", "tie", "a", "b"]
    s = agreement_scores(x, y)
    np.testing.assert_array_equal(s[:6], [1, 0, 0.5, 0.5, 1, 0.5])
    assert np.isnan(s[6]) and np.isnan(s[7])          # unlabelled pairs are left out
    assert agreement(x, y) == pytest.approx(3.5 / 6)
    assert agreement(y, x) == agreement(x, y)         # symmetric
    with pytest.raises(ValueError, match="unknown label"):
        agreement_scores(["yes"], ["a"])


def test_agreement_by_delta():
    x = ["a", "b", "tie", "a"]
    y = ["a", "a", "a", "a"]
    gaps = [0, 10, 30, 60]
    res = agreement_by_delta(x, y, gaps, [0, 25, 50, 100])
    assert res[0] == (pytest.approx(2.5 / 4), 4)
    assert res[25] == (pytest.approx(1.5 / 2), 2)
    assert res[50] == (1.0, 1)
    assert np.isnan(res[100][0]) and res[100][1] == 0
    t = rank_gap_agreement_table(y, {"judge": x}, gaps, [0, 50])
    assert t.row(0, named=True) == {"method": "judge", "Delta>=0": 62.5, "Delta>=50": 100.0, "n@0": 4, "n@50": 1}


def test_labels_from_scores_and_ratings():
    assert label_from_scores(3.0, 1.0) == "a" and label_from_scores(1.0, 3.0) == "b"
    assert label_from_scores(2.0, 2.0) == "tie" and label_from_scores(None, 1.0) is None
    ratings = pl.DataFrame({"query_id": ["q"] * 3, "cand_id": ["x", "y", "z"], "rating": [5.0, 0.0, 5.0]})
    pairs = pl.DataFrame({"query_id": ["q", "q", "q"], "a": ["x", "y", "x"], "b": ["y", "z", "z"]})
    assert labels_from_ratings(pairs, ratings) == ["a", "b", "tie"]


def _ranked(n_queries=4, n=20):
    rows = [(f"q{q}", f"q{q}c{k}", "both", float(n - k), float(n - k), k) for q in range(n_queries) for k in range(n)]
    return final_ranks(pl.DataFrame(rows, schema=["query_id", "cand_id", "group", "rating", "theta", "position"], orient="row"))


@pytest.mark.parametrize("how", ["uniform_pair", "uniform_gap"])
def test_sample_pairs_distinct_seeded_and_consistent(how):
    ranked = _ranked()
    a = sample_ranked_pairs(ranked, 60, np.random.default_rng(1), how)
    b = sample_ranked_pairs(ranked, 60, np.random.default_rng(1), how)
    assert a.equals(b)
    assert a["pair_id"].n_unique() == 60 and a["task_id"].to_list() == list(range(60))
    assert (a["rank_gap"] == (a["rank_a"] - a["rank_b"]).abs()).all() and (a["rank_gap"] >= 1).all()
    # candidate k of every query has rank k + 1 here
    for q, ca, ra in a.select("query_id", "a", "rank_a").iter_rows():
        assert ca == f"{q}c{ra - 1}"
    # display order is a coin flip: the better-ranked candidate is not always shown first
    first_better = (a["rank_a"] < a["rank_b"]).mean()
    assert 0.2 < first_better < 0.8
    with pytest.raises(ValueError, match="jv_pairs"):
        sample_ranked_pairs(_ranked(1, 3), 4, np.random.default_rng(0), how)


def test_uniform_gap_reaches_large_gaps_more_often():
    ranked = _ranked(1, 150)
    g_pair = sample_ranked_pairs(ranked, 2000, np.random.default_rng(0), "uniform_pair")["rank_gap"].to_numpy()
    g_gap = sample_ranked_pairs(ranked, 2000, np.random.default_rng(0), "uniform_gap")["rank_gap"].to_numpy()
    # random pairs: P(gap >= 50) = (100*101/2) / (150*149/2) ~ 0.452; uniform gaps: 100/149 ~ 0.671
    assert (g_pair >= 50).mean() == pytest.approx(0.452, abs=0.04)
    assert (g_gap >= 50).mean() == pytest.approx(0.671, abs=0.04)


def test_judge_labels_map_outcomes():
    from saber_lib.llm.types import Failure

    class Fixed:
        def judge_pairs(self, items):
            return [1, 2, 0, Failure("boom")][:len(items)]

    pairs = pl.DataFrame({"query_id": ["q"] * 4, "a": ["x", "y", "x", "x"], "b": ["y", "x", "z", "y"]})
    docs = {k: k.upper() for k in "qxyz"}
    assert judge_labels(Fixed(), pairs, docs) == ["a", "b", "tie", "failure"]


def test_annotation_store_round_trip(tmp_path):
    st = AnnotationStore.for_run(tmp_path, "alice")
    st.save("p1", "q", "x", "y", "a")
    st.save("p2", "q", "x", "z", "tie")
    st.save("p1", "q", "x", "y", "b")                 # re-saving replaces
    again = AnnotationStore.for_run(tmp_path, "alice")
    assert [(r["pair_id"], r["label"]) for r in again.records()] == [("p1", "b"), ("p2", "tie")]
    lines = (tmp_path / "annotations" / "alice.jsonl").read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(l)["annotator"] == "alice" for l in lines)
    assert not list((tmp_path / "annotations").glob("*.tmp*"))  # the temp file was renamed away
    # a task showing the pair the other way round gets the flipped label
    tasks = pl.DataFrame({"pair_id": ["p1", "p1", "p2", "p3"], "a": ["x", "y", "z", "x"], "b": ["y", "x", "x", "w"]})
    assert again.labels_for(tasks) == ["b", "a", "tie", None]
    assert again.remove("p1") and not again.remove("p1")
    assert [r["pair_id"] for r in AnnotationStore.for_run(tmp_path, "alice").records()] == ["p2"]
    assert set(load_annotations(tmp_path)) == {"alice"}


def test_an_annotation_write_that_fails_leaves_the_old_file_and_no_temp_file(tmp_path, monkeypatch):
    st = AnnotationStore.for_run(tmp_path, "alice")
    st.save("p1", "q", "x", "y", "a")
    path = tmp_path / "annotations" / "alice.jsonl"
    before = path.read_bytes()

    def no_disk(fd):   # the lines are written, the flush to disk fails
        raise OSError("planted: device went away")

    monkeypatch.setattr(annotate_ui.os, "fsync", no_disk)
    with pytest.raises(OSError, match="planted"):
        st.save("p2", "q", "x", "z", "b")
    with pytest.raises(OSError, match="planted"):
        st.remove("p1")
    monkeypatch.undo()
    assert sorted(p.name for p in path.parent.iterdir()) == ["alice.jsonl"] and path.read_bytes() == before
    # what the store holds is what the file holds: the failed changes are not kept in memory either
    assert [r["pair_id"] for r in st.records()] == ["p1"]
    assert [r["pair_id"] for r in AnnotationStore.for_run(tmp_path, "alice").records()] == ["p1"]


def test_annotation_store_rejects_bad_lines(tmp_path):
    d = tmp_path / "annotations"
    d.mkdir()
    (d / "bob.jsonl").write_text('{"pair_id": "p", "label": "a", "a": "x", "b": "y"}\nnot json\n')
    with pytest.raises(ValueError, match=r"bob.jsonl line 2"):
        AnnotationStore(d, "bob")
    with pytest.raises(ValueError, match="annotator name"):
        AnnotationStore(d, "../evil")


def test_inter_annotator():
    res = inter_annotator({"a1": {"p1": "a", "p2": "tie", "p3": "b"}, "a2": {"p1": "a", "p2": "b"}, "a3": {"p9": "a"}})
    assert res == [{"x": "a1", "y": "a2", "n": 2, "agreement": 0.75}]


def test_annotation_tool_buttons(tmp_path):
    pytest.importorskip("ipywidgets")
    tasks = pl.DataFrame({"task_id": [0, 1], "pair_id": ["p0", "p1"], "query_id": ["q", "q"],
                          "a": ["x", "y"], "b": ["y", "z"]})
    texts = {"q": "Target $x^2$", "x": "Cand <x>", "y": "Cand y", "z": "Cand z"}
    st = AnnotationStore.for_run(tmp_path, "ann")
    tool = AnnotationTool(tasks, texts, st)
    assert "$x^2$" in tool.query.value and "&lt;x&gt;" in tool.cand1.value   # math kept, HTML escaped
    tool.save()                                       # nothing chosen: nothing saved
    assert len(st) == 0
    tool.b2.value = True                              # click Candidate 2
    tool.bsave.click()
    assert st.get("p0")["label"] == "b" and tool.current == 1 and tool.finished() == [0]
    assert tool.task_list.options[0][0].startswith("✓")
    tool.btie.value = True
    tool.bsave.click()
    assert st.get("p1")["label"] == "tie" and tool.finished() == [0, 1]
    tool.task_list.value = 0
    tool.bremove.click()                              # asks for confirmation first
    assert "p0" in st
    tool.bremove.click()
    assert "p0" not in st and tool.finished() == [1]
    assert [r["pair_id"] for r in AnnotationStore.for_run(tmp_path, "ann").records()] == ["p1"]


def _tool_tasks(n):
    ids = [f"c{k}" for k in range(n + 1)]
    tasks = pl.DataFrame({"task_id": list(range(n)), "pair_id": [f"p{k}" for k in range(n)], "query_id": ["q"] * n,
                          "a": ids[:-1], "b": ids[1:]})
    return tasks, {"q": "Target $\\sum_i i$", **{c: f"Cand {c} \\(x_{c}\\)" for c in ids}}


def test_annotation_tool_keys_progress_resume_and_agreement(tmp_path):
    pytest.importorskip("ipywidgets")
    tasks, texts = _tool_tasks(12)
    judge = {f"p{k}": ("a" if k % 2 else "b") for k in range(12)}
    AnnotationStore.for_run(tmp_path, "bob").save("p3", "q", "c3", "c4", "a")     # another annotator
    st = AnnotationStore.for_run(tmp_path, "ann")
    tool = AnnotationTool(tasks, texts, st, judge_labels=judge, judge_name="J", agreement=agreement)
    assert "0</b> / 12" in tool.progress.value and "bob: 1 / 12" in tool.progress.value
    tool.keys.value = "1"                      # typed "1": Candidate 1 for task 0, next task
    tool.keys.value = "12"                     # a second key arrives with the first still in the box
    tool.keys.value = "12s"                    # skip task 2
    tool.keys.value = "12st"                   # tie on task 3
    tool.keys.value = "12stx"                  # unknown key: ignored
    tool.keys.value = "12st"                   # backspace: ignored
    assert [st.get(f"p{k}")["label"] if f"p{k}" in st else None for k in range(4)] == ["a", "b", None, "tie"]
    assert tool.key_log == ["1", "2", "s", "t"] and tool.current == 4
    # the list marks the task shown: its index (what the browser draws) follows, with the finished ticks
    assert tool.task_list.index == 4 and tool.task_list.label == "· task 4"
    assert [label[0] for label, _ in tool.task_list.options[:5]] == ["✓", "✓", "·", "✓", "·"]
    tool.b2.value = True                       # clicking Candidate 2 clears Candidate 1 / Tie
    assert tool.choice == "b" and (tool.b1.value, tool.b2.value, tool.btie.value) == (False, True, False)
    tool.btie.value = True
    assert tool.choice == "tie" and (tool.b1.value, tool.b2.value, tool.btie.value) == (False, False, True)
    tool.btie.value = False
    assert tool.choice is None
    assert "3</b> / 12" in tool.progress.value and tool.agreement.value == ""
    for k in "1212121":                        # 10 labels: the read-out appears
        tool.key(k)
    assert len(st) == 10 and "after 10 labels" in tool.agreement.value
    mine = st.labels_for(tasks)
    assert f"{agreement(mine, [judge[f'p{k}'] for k in range(12)]):.2f}" in tool.agreement.value
    # resume: a new tool opens after the most recent judgment, not on the skipped task 2
    again = AnnotationTool(tasks, texts, AnnotationStore.for_run(tmp_path, "ann"), judge_labels=judge,
                           agreement=agreement)
    assert again.current == 11 and "after 10 labels" in again.agreement.value
    again.key("s")                             # the only other open task is 2
    assert again.current == 2


def test_stage_pairs_rank_by_rating_and_repeat_with_the_seed():
    from saber_lib.validation.agreement import stage_pairs

    ratings = pl.DataFrame({"query_id": ["q"] * 3, "cand_id": ["x", "y", "z"], "group": ["both"] * 3,
                            "rating": [1.0, 3.0, 2.0], "position": [0, 1, 2]})
    pairs = stage_pairs(ratings, 3, seed=7, how="uniform_pair")  # all 3 pairs of the query
    rank = {"y": 1, "z": 2, "x": 3}
    assert sorted(pairs["rank_gap"].to_list()) == [1, 1, 2]
    for a, b, ra, rb in pairs.select("a", "b", "rank_a", "rank_b").iter_rows():
        assert (ra, rb) == (rank[a], rank[b])
    assert pairs.equals(stage_pairs(ratings, 3, seed=7, how="uniform_pair"))


def test_pair_docs_take_the_pairs_queries_and_their_candidates_clipped_for_an_llm():
    from saber_lib.validation.agreement import pair_docs, pairs_summary

    corpus = pl.DataFrame({"doc_id": ["q1", "q2", "c1", "c2", "c3"], "problem": ["one two three four"] * 5,
                           "solution": ["s t u"] * 5})
    bench = pl.DataFrame({"query_id": ["q1", "q1", "q2"], "cand_id": ["c1", "c2", "c3"]})
    pairs = pl.DataFrame({"query_id": ["q1", "q1"], "a": ["c1", "c2"], "b": ["c2", "c1"], "rank_gap": [1, 3]})
    docs = pair_docs(corpus, bench, pairs, {"backend": "vllm", "text_max_words": 2})
    assert set(docs) == {"q1", "c1", "c2"}
    assert len(docs["c1"].problem.split()) < 4                       # clipped for the LLM
    full = pair_docs(corpus, bench, pairs, {"backend": "none", "text_max_words": 2})
    assert full["c1"].problem == "one two three four"                # no LLM: full texts
    assert pairs_summary(pairs) == "2 pairs from 1 queries; rank gap median 2 (min 1, max 3)"


def test_annotator_agreement_uses_each_stores_labelled_pairs():
    from saber_lib.validation.agreement import annotator_agreement

    class Store:
        def __init__(self, labels):
            self.labels = labels

        def labels_for(self, pairs):
            return self.labels

    pairs = pl.DataFrame({"pair_id": ["p1", "p2", "p3"]})
    out = annotator_agreement(pairs, {"ann1": Store(["a", "b", None]), "ann2": Store(["a", "tie", "b"])})
    assert out == [{"x": "ann1", "y": "ann2", "n": 2, "agreement": pytest.approx(0.75)}]  # 1 and 0.5 on p1, p2


def test_judge_note_record_and_captions():
    from saber_lib.validation.agreement import captions, judge_note, stage_record

    assert judge_note("llm", {"text_max_words": 50}, with_llm=True) == "pairwise judge: llm; texts clipped to 50 words"
    assert judge_note("sim", {"text_max_words": 50}, with_llm=False) == "pairwise judge: sim"

    class Named:
        def __init__(self, name):
            self.name = name

        def describe(self):
            return {"calls": 3}

    pairs, ref = pl.DataFrame({"pair_id": ["p1", "p2"]}), pl.DataFrame({"pair_id": ["p1"]})
    rec = stage_record(Named("swap(j)"), Named("j"), None, "b", "humans", True, pairs, ref, [], [])
    assert rec["n_pairs"] == 2 and rec["n_reference_labels"] == 1 and "llm" not in rec
    assert rec["judges"] == {"pairwise": "swap(j)", "base": "j"} and rec["backend"] == "swap(j)"
    assert stage_record(Named("j"), Named("j"), Named("vllm"), "b", "r", False, pairs, ref, [], [])["llm"] == {"calls": 3}
    cap = captions("humans", "judge: sim")
    assert cap["figure"] == "Agreement with humans by rank-gap threshold."
    assert cap["table"].endswith("at least Delta; judge: sim")
