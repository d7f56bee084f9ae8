"""The evaluate stage's recipes (saber_lib.evaluate.stage): which benchmark, scoring, MTEB correlation."""
import json

import polars as pl
import pytest

from saber_lib.evaluate import stage as evaluate_stage
from saber_lib.pipeline.context import StageContext


def _write(run, stage, name, df):
    (run / stage).mkdir(parents=True, exist_ok=True)
    df.write_parquet(run / stage / name)


def _built(run):
    bench = pl.DataFrame({"query_id": ["q1", "q1", "q2", "q2"], "query_domains": [["Algebra"]] * 2 + [["Geometry"]] * 2,
                          "cand_id": ["c1", "c2", "c1", "c2"], "position": [0, 1, 0, 1]})
    _write(run, "select", "benchmark.parquet", bench)
    _write(run, "tournament", "ratings.parquet", pl.DataFrame({"query_id": ["q1", "q1"], "cand_id": ["c1", "c2"],
                                                                "rating": [5.0, 0.0]}))   # q2 not rated
    _write(run, "corpus", "corpus.parquet", pl.DataFrame({
        "doc_id": ["q1", "q2", "c1", "c2"], "problem": ["prime numbers", "a triangle", "prime numbers below ten", "circles"],
        "solution": ["", "", "", ""], "source": ["math", "aops", "math", "math"],
        "source_level": ["Level 2", None, "Level 1", None]}))
    (run / "tournament" / "manifest.json").write_text(json.dumps({"info": {"judge": "simulated"}}))


def test_the_built_benchmark_keeps_rated_queries_and_labels_levels_with_their_source(tmp_path):
    run = tmp_path / "run"
    _built(run)
    ctx = StageContext(run, "evaluate", figures_dir=tmp_path / "fig")
    inp = evaluate_stage.load_benchmark(ctx, "built")
    assert not inp.on_release and inp.queries is None and inp.n_queries == 1
    assert inp.benchmark["query_id"].to_list() == ["q1", "q1"]
    assert inp.query_domains == {"q1": ["Algebra"]} and inp.query_levels == {"q1": "math: Level 2"}
    assert inp.judge == "simulated (CPU stand-in, NOT the paper's LLM judge)" and inp.tournament_info == {"judge": "simulated"}
    scores, info = evaluate_stage.score_retrievers(["bm25"], inp, ["statement-full"], k1=1.5, b=0.75, log=None)
    assert scores.select("query_id", "cand_id").rows() == [("q1", "c1"), ("q1", "c2")]
    s = scores["score"].to_list()
    assert s[0] > 0 == s[1]                       # "prime numbers" is in c1 only
    assert info["bm25"]["backend"].startswith("bm25s==")
    with pytest.raises(ValueError, match="^evaluate.retrievers: .*unknown retriever 'nope'"):
        evaluate_stage.score_retrievers(["nope"], inp, ["statement-full"], k1=1.5, b=0.75, log=None)
    assert evaluate_stage.caption_tail(inp, info).startswith("1 queries, ratings from the tournament judged by simulated")


def test_the_release_reads_its_own_tables_or_says_which_key_to_set(tmp_path):
    run = tmp_path / "run"
    ctx = StageContext(run, "evaluate", figures_dir=tmp_path / "fig")
    with pytest.raises(ValueError, match="set released.benchmark_dir"):
        evaluate_stage.load_benchmark(ctx, "released")
    _write(run, "released", "benchmark.parquet", pl.DataFrame({"query_id": ["0"], "query_domains": [["Algebra"]],
                                                               "cand_id": ["d1"], "position": [0]}))
    _write(run, "released", "ratings.parquet", pl.DataFrame({"query_id": ["0"], "cand_id": ["d1"], "rating": [3.0]}))
    _write(run, "released", "documents.parquet", pl.DataFrame({"doc_id": ["d1"], "problem": ["p"], "solution": ["s"]}))
    _write(run, "released", "queries.parquet", pl.DataFrame({"query_id": ["0"], "problem": ["q"], "solution": [""]}))
    inp = evaluate_stage.load_benchmark(ctx, "released")
    assert inp.on_release and inp.queries["query_id"].to_list() == ["0"] and inp.query_levels == {}
    assert inp.judge == evaluate_stage.RELEASED_JUDGE and inp.tournament_info == {}
    with pytest.raises(ValueError, match="evaluate.benchmark: 'other'"):
        evaluate_stage.load_benchmark(ctx, "other")


def test_mteb_correlation_needs_three_common_models():
    summary = pl.DataFrame({"retriever": ["a", "b", "c", "d"], "setting": ["statement-full"] * 4,
                            "group": ["Overall"] * 4, "mean": [0.1, 0.2, 0.3, 0.4]})
    corr, line = evaluate_stage.mteb_correlation(summary, {"a": 10.0, "b": 20.0, "c": 30.0})
    assert corr["pearson"] == pytest.approx(1.0) and corr["spearman"] == pytest.approx(1.0)
    assert line == "3 models: Pearson 1.00, Spearman 1.00"
    corr, line = evaluate_stage.mteb_correlation(summary, {"a": 1.0, "zz": 2.0})
    assert corr is None and "covers 1 of the evaluated models (3 needed)" in line
