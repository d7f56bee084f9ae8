"""The open-corpus stage's recipes (saber_lib.open_corpus.stage) on hand-made frames."""
import json
from types import SimpleNamespace

import polars as pl

from saber_lib.open_corpus import stage
from saber_lib.pipeline.context import StageContext


def _inputs(tmp_path, summaries_info):
    run = tmp_path / "run"
    for st, name, df in [
        ("corpus", "corpus.parquet", pl.DataFrame({"doc_id": ["q1", "q2", "d1"], "problem": ["a", "b", "c"]})),
        ("corpus", "dedup_log.parquet", pl.DataFrame({"doc_id": ["d9"], "kept": ["d1"]})),
        ("summaries", "summaries.parquet", pl.DataFrame({"doc_id": ["d1"], "summary_text": ["s"]})),
        ("select", "benchmark.parquet", pl.DataFrame({"query_id": ["q2", "q2", "q1"], "cand_id": ["d1", "q1", "d1"]})),
        ("tournament", "ratings.parquet", pl.DataFrame({"query_id": ["q2"], "cand_id": ["d1"], "rating": [4.0]})),
    ]:
        (run / st).mkdir(parents=True, exist_ok=True)
        df.write_parquet(run / st / name)
    (run / "tournament" / "manifest.json").write_text(json.dumps({"info": {"judge": "llm", "model": "m"}}))
    (run / "summaries" / "manifest.json").write_text(json.dumps({"info": summaries_info}))
    return stage.load_inputs(StageContext(run, "open_corpus", figures_dir=tmp_path / "fig"))


def test_inputs_keep_rated_queries_and_name_the_summarizer_or_its_backend(tmp_path):
    inp = _inputs(tmp_path, {"backend": "extractive:tfidf"})
    assert inp.queries["query_id"].to_list() == ["q2"]              # q1 has no rating
    assert inp.summarizer == "extractive:tfidf" and inp.judge_name == "llm / m"
    assert _inputs(tmp_path / "b", {"summarizer": "llm:x", "backend": "y"}).summarizer == "llm:x"


def test_retrieval_record_and_the_caption_tail(tmp_path):
    result = SimpleNamespace(info={
        "indexes": {"bm25/statement": {"seconds": 1.234, "built": True, "model": "bm25s"},
                    "minilm/full": {"seconds": 2.0, "model": "mini"}},
        "timing": {"summary_fallback/summary": 3, "score": 0.12345}, "excluded_duplicates": 7})
    rec = stage.retrieval_record(result, "llm:x", 5.678)
    assert rec["index_backends"] == ["bm25: bm25s", "minilm: mini"] and rec["retrieval_s"] == 5.68
    assert rec["index_built"] == {"bm25/statement": True, "minilm/full": False}
    assert rec["summary_fallback"] == 3 and rec["timing"]["score"] == 0.123
    inp = _inputs(tmp_path, {"summarizer": "llm:x"})
    tail = stage.caption_tail({"oc_relevance_cutoff": 3.0, "oc_pool_depth": 5}, inp, "sim", rec["index_backends"], 3)
    assert tail == ("1 queries over 3 documents; relevant = rating >= 3; ratings: benchmark tournament + pooled depth 5, "
                    "judge sim; indexes: bm25: bm25s, minilm: mini; summaries: llm:x (3 documents without a summary "
                    "indexed by their statement)")
    assert stage.caption_tail({"oc_relevance_cutoff": 3.0, "oc_pool_depth": 5}, inp, "sim", [], 0).endswith("llm:x")


def test_without_pool_judging_the_qrels_are_the_benchmark_ratings(tmp_path):
    inp = _inputs(tmp_path, {})
    pool = pl.DataFrame({"query_id": ["q2"], "cand_id": ["q1"], "n_systems": [1], "best_rank": [1]})
    pj = stage.judge_pooled({"oc_judge_pool": False, "judge": "simulated"}, inp, pool, tmp_path / "rounds")
    assert pj.qrels.rows() == [("q2", "d1", 4.0, "benchmark")] and pj.judge_label == "none"
    assert pj.per_round.height == 0 and pj.info is None and pj.backend is None


def _metrics():
    rows = []
    for qrels, judged in (("benchmark", 0.5), ("pooled", 0.9)):
        for metric, k, mean in (("hit", 1, 0.2), ("hit", 10, 0.6), ("mrr", 10, 0.4), ("ndcg", 10, 0.3)):
            rows.append((qrels, "bm25", "full", metric, k, mean, mean - 0.1, mean + 0.1, judged, 4))
    return pl.DataFrame(rows, schema=["qrels", "system", "representation", "metric", "k", "mean", "ci_low", "ci_high",
                                      "judged_at_k", "n_queries"], orient="row")


def test_main_and_interval_tables():
    assert stage.shown_k([1, 5, 10, 20]) == 10 and stage.shown_k([1, 5]) == 5
    main = stage.pooled_main_table(_metrics(), [1, 10])
    assert main.columns == ["system", "representation", "hit@10", "mrr@10", "ndcg@10", "judged@10 before pooling",
                            "judged@10"]
    assert main.row(0) == ("bm25", "full", 0.6, 0.4, 0.3, 0.5, 0.9)
    ci = stage.pooled_ci_table(_metrics())
    assert ci.select("metric", "k", "mean [CI]").rows() == [("hit", 1, "0.2 [0.1, 0.3]"), ("hit", 10, "0.6 [0.5, 0.7]"),
                                                            ("mrr", 10, "0.4 [0.3, 0.5]")]
