"""The robustness stage's section functions (saber_lib.robustness.stage) on small hand-made inputs."""
import numpy as np
import polars as pl

from saber_lib.robustness import panel, simulate, stage
from saber_lib.robustness.intervals import ndcg_two_level
from saber_lib.judging.draws import rating_draws

PARAMS = {"seed": 0, "ndcg_k": 10, "rob_setting": "statement-full", "n_bootstrap": 200, "ci_level": 0.95,
          "rating_draws": 20, "rating_draw_method": "outcomes", "bt_alpha": 0.5, "rating_top": 5.0,
          "mem_retrievers": [], "retrievers": ["bm25", "jaccard"], "mem_control": "bm25", "bm25_k1": 1.5,
          "bm25_b": 0.75, "embed_max_chunks": 0, "cache_dir": None, "mem_llm_paraphrase": False,
          "mem_paraphrase_retries": 1,
          "mem_variants": ["rename_variables"], "mem_permutations": 1000, "mem_alpha": 0.05,
          "stop_rule": "stable", "stop_tol": 0.0, "stop_min_shrink": 0.02, "stop_window": 3, "stop_min_rounds": 1,
          "stop_draws": 8, "stop_on_run": False, "schedule": "swiss", "stop_sim_queries": 3,
          "stop_sim_candidates": 8, "rounds": 4, "judge_sim_agreement": 0.78, "stop_alpha": 0.05,
          "stop_permutations": 200}


def test_memorization_names_add_the_control_and_leave_out_trec_runs():
    p = {**PARAMS, "retrievers": ["tfidf", "run:/x/run.trec", "minilm"]}
    assert stage.memorization_names(p) == ["tfidf", "minilm", "bm25"]
    assert stage.memorization_names({**p, "mem_retrievers": ["bm25", "jaccard"]}) == ["bm25", "jaccard"]


def test_swap_matrix_is_symmetric_with_an_empty_diagonal():
    swaps = pl.DataFrame({"draw_method": ["outcomes"] * 3 + ["judgments"],
                          "retriever_1": ["a", "a", "b", "a"], "retriever_2": ["b", "c", "c", "b"],
                          "p_swap_two_level": [0.1, 0.2, 0.3, 0.9]})
    names, mat = stage.swap_matrix(swaps, "outcomes")
    assert names == ["a", "b", "c"] and mat.columns == ["retriever", "a", "b", "c"]
    assert mat.rows() == [("a", None, 0.1, 0.2), ("b", 0.1, None, 0.3), ("c", 0.2, 0.3, None)]


def test_intervals_section_pairs_the_tournament_draws_with_the_other_method():
    bench = simulate.SyntheticBenchmark(n_queries=6, n_cands=8, seed=3)
    scores = bench.scores({"good": 0.3, "bad": 3.0}, seed=4)
    judgments = simulate.swiss_judgments(bench, bench.judge(agreement=1.0), rounds=4)
    ratings = simulate.ratings_table(bench, judgments)
    draws = rating_draws(judgments, ratings, n_draws=20, seed=0, method="outcomes", progress=False)   # noiseless: no spread
    out = stage.intervals_section(PARAMS, judgments, ratings, draws, scores, "backends: x", "sim judge")
    assert out["methods"] == ("outcomes", "judgments")
    t = out["table"]
    assert t["draw_method"].to_list() == ["judgments"] * 2 + ["outcomes"] * 2 and t["retriever"].to_list() == ["bad", "good"] * 2
    # the tournament's own draws come through unchanged: the same numbers as the rating-draw module's
    ref = ndcg_two_level(scores, ratings, draws, k=10, n_boot=200, level=0.95, seed=0, progress=False).summary
    got = out["intervals"].filter(pl.col("draw_method") == "outcomes").drop("draw_method")
    assert got.equals(ref)
    assert (got["judge_variance_share"] == 0).all() and (got["width_added_by_judge"] == 0).all()  # noiseless, design kept
    other = out["intervals"].filter(pl.col("draw_method") == "judgments")
    assert (other["judge_variance_share"] > 0).any()             # bootstrapping the judgments moves ratings
    assert "20 rating draws per query. backends: x." in out["caption"] and "sim judge" in out["swap_caption"]
    assert set(out["swaps"]["draw_method"]) == {"outcomes", "judgments"} and out["seconds"] >= 0


def test_memorization_section_names_its_control_and_flag_rule():
    corpus = pl.DataFrame({"doc_id": ["q1", "q2", "c1", "c2", "c3"],
                           "problem": ["Find $x$ with $x^2 = 4$.", "Let $y = 2$; find $y + 1$.", "Solve $x^2 = 4$.",
                                       "Add one to $y$.", "Count the ways."],
                           "solution": ["$x = 2$", "$3$", "", "", ""]})
    ratings = pl.DataFrame({"query_id": ["q1"] * 3 + ["q2"] * 3, "cand_id": ["c1", "c2", "c3"] * 2,
                            "position": [0, 1, 2] * 2, "rating": [5.0, 1.0, 0.0, 1.0, 5.0, 0.0]})
    out = stage.memorization_section(PARAMS, corpus, ratings, tournament_judge="sim")
    t = out["table"]
    assert set(t["retriever"]) == {"bm25", "jaccard"} and set(t["variant"]) == {"rename_variables", "pooled"}
    assert (t["control"] == "bm25").all() and t.filter(pl.col("retriever") == "bm25")["p_value"].null_count() == 2
    assert "control: bm25" in out["caption"] and "Holm-adjusted over 2 tests" in out["caption"]
    assert "flagged when the excess drop is positive and the adjusted p < 0.05" in out["caption"]
    assert out["retrievers"].keys() == {"bm25", "jaccard"}


def test_stopping_section_on_a_simulation_and_a_skipped_run():
    out = stage.stopping_section(PARAMS, None, None, None, None, {})
    assert out["summary"].height == 1 and out["systems"].height == len(panel.SIM_QUALITIES)
    assert "stable" in out["caption"] and "R = 4" in out["caption"] and out["notes"] == []
    none = stage.stopping_section({**PARAMS, "stop_on_run": True, "schedule": "random", "stop_sim_queries": 0},
                                  None, None, None, None, {})
    assert none["summary"] is None and none["notes"] == ["stopping on this run skipped: the tournament's schedule "
                                                         "is 'random', not swiss"]
    assert np.isfinite(none["seconds"])
