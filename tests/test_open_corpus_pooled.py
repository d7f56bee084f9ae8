"""Pooled judging of the open-corpus track: the pool is rated exactly, on the benchmark's scale,
and the qrels grow when another system is added (small synthetic cases, simulated judge)."""
import numpy as np
import polars as pl
import pytest

from saber_lib.judging.simulated import SimulatedJudge
from saber_lib.open_corpus import pool_to_judge, run_open_corpus
from saber_lib.open_corpus.pooled import _anchor, cap_pool, judge_pool, round_budget, score_runs
from saber_lib.core.config_types import ProfileError

WORDS = ["prime", "modulo", "triangle", "area", "circle", "lattice", "path", "grid", "parity", "quadratic",
         "factor", "root", "integer", "square", "sum", "divisor", "angle", "chord", "graph", "coloring"]


def _corpus(n=40):
    rows = []
    for i in range(n):
        words = [WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(6)]
        rows.append((f"s:{i}", "Find " + " ".join(words), "Use " + " ".join(reversed(words[:3]))))
    return pl.DataFrame(rows, schema=["doc_id", "problem", "solution"], orient="row")


def _ratings(qids, n_rated=4):
    rows = []
    for qi, q in enumerate(qids):
        for j in range(n_rated):
            rows.append((q, f"s:{(int(q[2:]) + 5 + 3 * j) % 40}", j, float(j * 5 / (n_rated - 1))))
    return pl.DataFrame(rows, schema={"query_id": pl.String, "cand_id": pl.String, "position": pl.Int64,
                                      "rating": pl.Float64}, orient="row")


def _track(systems, corpus, queries, ratings):
    return run_open_corpus(corpus, queries, systems, ratings, representations=["statement"], ks=[1, 5],
                           pool_depth=5, n_bootstrap=20)


@pytest.fixture
def setup():
    corpus = _corpus()
    queries = pl.DataFrame({"query_id": ["s:0", "s:11", "s:23"]})
    return corpus, queries, _ratings(queries["query_id"].to_list())


def test_pooled_judging_rates_exactly_the_pool(setup, tmp_path):
    corpus, queries, ratings = setup
    res = _track(["bm25"], corpus, queries, ratings)
    assert res.pool.height > 0
    judged = judge_pool(ratings, res.pool, corpus, SimulatedJudge(seed=1), rounds=4, seed=0, store_dir=tmp_path / "r")
    new = judged.qrels.filter(pl.col("source") == "pool")
    assert sorted(new.select("query_id", "cand_id").rows()) == sorted(res.pool.select("query_id", "cand_id").rows())
    # the benchmark's ratings are kept as they are, the pooled ones are on its 0-5 scale
    old = judged.qrels.filter(pl.col("source") == "benchmark").sort("query_id", "cand_id")
    assert old.select("query_id", "cand_id", "rating").equals(
        ratings.select("query_id", "cand_id", "rating").sort("query_id", "cand_id"))
    assert new["rating"].min() >= 0 and new["rating"].max() <= 5
    # every judgment is of the query's rated candidates and pooled documents; the pool is then empty
    ids = set(judged.qrels.select("query_id", "cand_id").rows())
    j = judged.judgments
    assert {(q, a) for q, a in j.select("query_id", "a").rows()} <= ids
    assert pool_to_judge(res.runs, judged.qrels, 5).height == 0
    assert judged.per_round["judgments"].sum() == j.height
    # a second call resumes from the stored rounds: no new judge call, the same ratings
    again = judge_pool(ratings, res.pool, corpus, SimulatedJudge(seed=1), rounds=4, seed=0, store_dir=tmp_path / "r")
    assert again.info["judge_calls"] == 0 and again.qrels.equals(judged.qrels)


def test_adding_a_system_grows_the_qrels(setup, tmp_path):
    corpus, queries, ratings = setup
    one = _track(["bm25"], corpus, queries, ratings)
    two = _track(["bm25", "tfidf"], corpus, queries, ratings)
    q1 = judge_pool(ratings, one.pool, corpus, SimulatedJudge(seed=1), rounds=3, store_dir=tmp_path / "r").qrels
    q2 = judge_pool(ratings, two.pool, corpus, SimulatedJudge(seed=1), rounds=3, store_dir=tmp_path / "r").qrels
    k1, k2 = set(q1.select("query_id", "cand_id").rows()), set(q2.select("query_id", "cand_id").rows())
    assert k1 <= k2
    assert len(k2) == ratings.height + two.pool.height >= len(k1) == ratings.height + one.pool.height
    # every run is fully judged at the pool depth against the grown qrels
    pq = score_runs(two.runs, q2, ks=[1, 5])
    assert pq.filter(pl.col("k") == 5)["judged_at_k"].min() == pytest.approx(1.0)
    # and the budget table counts the same pool
    b = round_budget(two.runs, ratings, depths=[5], rounds=3)
    assert b["pooled_docs"].to_list() == [two.pool.height]


def test_score_runs_matches_the_track_on_the_same_qrels(setup):
    corpus, queries, ratings = setup
    res = _track(["bm25", "tfidf"], corpus, queries, ratings)
    again = score_runs(res.runs, ratings, ks=[1, 5])
    key = ["system", "representation", "query_id", "metric", "k"]
    assert again.sort(key).equals(res.per_query.sort(key), null_equal=True)


def test_cap_and_anchor():
    pool = pl.DataFrame({"query_id": ["q"] * 3, "cand_id": ["a", "b", "c"], "n_systems": [1, 2, 1], "best_rank": [2, 1, 3]})
    assert cap_pool(pool, 2)["cand_id"].to_list() == ["b", "a"]
    theta = np.array([0.0, 1.0, 2.0, 3.0, -1.0])
    is_bench = np.array([True, False, True, False, False])
    assert _anchor(theta, is_bench, 5.0).tolist() == [0.0, 2.5, 5.0, 5.0, 0.0]


def test_profile_checks_open_corpus_systems():
    from pathlib import Path

    from saber_lib.pipeline.runner import load_run_profile

    tiny = Path(__file__).resolve().parent.parent / "params" / "tiny.yaml"
    ok = load_run_profile(tiny, {"open_corpus.oc_systems": ["bm25", "minilm@hnsw", "bm25>minilm", "approach0"]})
    assert ok.values["open_corpus"]["oc_relevance_cutoff"] == 3.0
    for bad in (["bm25x"], ["minilm@ivf"], ["bm25>"], ["bm25>nope"]):
        with pytest.raises(ProfileError, match="oc_systems"):
            load_run_profile(tiny, {"open_corpus.oc_systems": bad})
