"""Open-corpus track: metrics, duplicate exclusion, pooling, the index cache, exact vs HNSW."""
import math

import numpy as np
import polars as pl
import pytest

from saber_lib.llm.cache import ResponseCache
from saber_lib.llm.testing import ScriptedBackend
from saber_lib.llm.types import ChatResult
from saber_lib.open_corpus import (LLMPointwiseReranker, corpus_hash, duplicate_groups,
                                   exclusions, hit_at_k, judged_at_k, ndcg_open, per_query_metrics,
                                   pool_budget, pool_to_judge, recall_at_k, representation_texts, rerank,
                                   rr_at_k, run_open_corpus)
from saber_lib.retrieval.base import Retriever
from saber_lib.retrieval.index_cache import BUILD_COUNTS, cached_index
from saber_lib.retrieval.indexes import BM25Index, ExactDenseIndex, HnswIndex, TfidfIndex
from saber_lib.retrieval.lexical import BM25Retriever, TfidfRetriever


# ----------------------------------------------------------------------------- metrics by hand
RANKED = ["a", "b", "c", "d", "e"]
RATINGS = {"b": 1, "c": 4, "e": 5, "z": 3, "y": 0}   # z rated relevant but not retrieved


def test_hit_recall_rr_by_hand():
    # relevant (>= 3): c (rank 3), e (rank 5), z (not retrieved) -> |R| = 3
    assert hit_at_k(RANKED, RATINGS, 1, 3) == 0.0
    assert hit_at_k(RANKED, RATINGS, 2, 3) == 0.0
    assert hit_at_k(RANKED, RATINGS, 3, 3) == 1.0
    assert recall_at_k(RANKED, RATINGS, 3, 3) == pytest.approx(1 / 3)
    assert recall_at_k(RANKED, RATINGS, 5, 3) == pytest.approx(2 / 3)
    assert recall_at_k(RANKED, RATINGS, 100, 3) == pytest.approx(2 / 3)
    assert rr_at_k(RANKED, RATINGS, 2, 3) == 0.0
    assert rr_at_k(RANKED, RATINGS, 5, 3) == pytest.approx(1 / 3)
    # a lower cut-off makes b relevant
    assert rr_at_k(RANKED, RATINGS, 5, 1) == pytest.approx(1 / 2)
    # no relevant judgment at all: undefined
    assert math.isnan(hit_at_k(RANKED, {"a": 1}, 5, 3))
    assert math.isnan(rr_at_k(RANKED, {}, 5, 3))


def test_ndcg_by_hand_unjudged_count_as_zero():
    # gains 2^r - 1: a unjudged (0), b 1, c 15, d unjudged, e 31
    dcg = 0 + 1 / math.log2(3) + 15 / math.log2(4) + 0 + 31 / math.log2(6)
    ideal = 31 + 15 / math.log2(3) + 7 / math.log2(4) + 1 / math.log2(5) + 0
    assert ndcg_open(RANKED, RATINGS, 10) == pytest.approx(dcg / ideal)
    # k = 2 only looks at a, b; ideal over the two best ratings
    assert ndcg_open(RANKED, RATINGS, 2) == pytest.approx((1 / math.log2(3)) / (31 + 15 / math.log2(3)))
    assert math.isnan(ndcg_open(RANKED, {"a": 0}, 10))


def test_judged_at_k_divides_by_k():
    assert judged_at_k(RANKED, RATINGS, 5) == pytest.approx(3 / 5)
    assert judged_at_k(["b"], RATINGS, 10) == pytest.approx(1 / 10)


# ----------------------------------------------------------------------------- against ir-measures
def test_metrics_match_ir_measures_on_random_runs():
    irm = pytest.importorskip("ir_measures")
    from ir_measures import RR, R, Success, nDCG

    rng = np.random.default_rng(7)
    docs = [f"d{i}" for i in range(60)]
    run, qrels, scored, qrel_rows = {}, {}, [], []
    for q in range(30):
        qid = f"q{q}"
        ranked = list(rng.permutation(docs)[:40])
        run[qid] = ranked
        for i, d in enumerate(ranked):
            scored.append(irm.ScoredDoc(qid, d, float(100 - i)))   # distinct scores: the order is the rank
        judged = rng.permutation(docs)[: int(rng.integers(5, 30))]
        qrels[qid] = {d: int(rng.integers(0, 6)) for d in judged}
        qrel_rows += [irm.Qrel(qid, d, r) for d, r in qrels[qid].items()]
    cut = 3
    gains = {r: 2 ** r - 1 for r in range(6)}
    measures = {("hit", k): Success(rel=cut) @ k for k in (1, 5, 10, 20)}
    measures |= {("recall", k): R(rel=cut) @ k for k in (1, 5, 10, 20)}
    measures |= {("mrr", k): RR(rel=cut) @ k for k in (1, 5, 10, 20)}
    measures[("ndcg", 10)] = nDCG(gains=gains) @ 10
    ref = {}
    for m in irm.iter_calc(list(measures.values()), qrel_rows, scored):
        ref[(m.query_id, str(m.measure))] = m.value
    ours = per_query_metrics(run, qrels, ks=(1, 5, 10, 20), cutoff=cut, ndcg_k=10)
    checked = 0
    for q, metric, k, value, _ in ours:
        if math.isnan(value):   # no relevant judgment: left out of our means
            assert not any(r >= cut for r in qrels[q].values()) or metric == "ndcg"
            continue
        assert value == pytest.approx(ref[(q, str(measures[(metric, k)]))], abs=1e-9), (q, metric, k)
        checked += 1
    assert checked > 300


# ----------------------------------------------------------------------------- exclusion
def test_duplicate_groups_link_both_directions():
    log = pl.DataFrame({"removed_id": ["r1", "r2", "k2"], "kept_id": ["k1", "k1", "k3"]})
    g = duplicate_groups(log)
    assert g["r1"] == g["k1"] == g["r2"] == frozenset({"r1", "r2", "k1"})
    assert g["k3"] == frozenset({"k2", "k3"})
    ex = exclusions(["k1", "r2", "k3", "lonely"], log)
    assert ex["k1"] == {"k1", "r1", "r2"}
    assert ex["r2"] == {"k1", "r1", "r2"}          # a removed query excludes the kept doc
    assert ex["k3"] == {"k2", "k3"}
    assert ex["lonely"] == {"lonely"}


def _tiny_corpus():
    rows = [
        ("s:1", "Find all primes p such that p squared plus two is prime", "Check p modulo three"),
        ("s:2", "Find all primes p such that p squared plus two is also prime", "Modulo three argument"),
        ("s:3", "A triangle has sides three four five; find its area", "Heron or right angle"),
        ("s:4", "Count lattice paths in a grid from corner to corner", "Binomial coefficient"),
        ("s:5", "Prove that the sum of two odd primes is even", "Parity"),
        ("s:6", "Find the area of a circle inscribed in a square of side two", "Radius one"),
        ("s:7", "How many primes less than fifty are there", "List them"),
        ("s:8", "Solve x squared minus five x plus six equals zero", "Factor the quadratic"),
    ]
    return pl.DataFrame(rows, schema=["doc_id", "problem", "solution"], orient="row")


def test_run_excludes_query_and_its_duplicates(tmp_path):
    corpus = _tiny_corpus()
    # s:2 is (per this log) a near duplicate of s:1; "ext:9" is a removed record that duplicates s:3
    log = pl.DataFrame({"removed_id": ["s:2", "ext:9"], "kept_id": ["s:1", "s:3"]})
    queries = pl.DataFrame({"query_id": ["s:1", "ext:9"],
                            "query_text": ["Find all primes p such that p squared plus two is prime",
                                           "A triangle has sides three four five; find its area"]})
    ratings = pl.DataFrame({"query_id": ["s:1", "s:1", "ext:9"], "cand_id": ["s:2", "s:7", "s:6"],
                            "rating": [5, 4, 3]})
    res = run_open_corpus(corpus, queries, ["bm25", "tfidf"], ratings, representations=["statement"],
                          dedup_log=log, cache_dir=tmp_path, ks=(1, 5), n_bootstrap=50)
    got = {q: set(g["cand_id"]) for (q,), g in res.runs.group_by(["query_id"])}
    assert not got["s:1"] & {"s:1", "s:2"}
    assert not got["ext:9"] & {"s:3", "ext:9"}
    # without the log, the duplicate is the top hit for bm25
    res2 = run_open_corpus(corpus, queries, ["bm25"], ratings, representations=["statement"],
                           cache_dir=tmp_path, ks=(1, 5), n_bootstrap=50)
    top = res2.runs.filter((pl.col("query_id") == "s:1") & (pl.col("rank") == 1))["cand_id"][0]
    assert top == "s:2"
    # the rating of the duplicate is dropped: s:7 is the only relevant document left for s:1
    pq = res.per_query.filter((pl.col("query_id") == "s:1") & (pl.col("system") == "bm25")
                              & (pl.col("metric") == "recall") & (pl.col("k") == 5))
    ranked = res.runs.filter((pl.col("query_id") == "s:1") & (pl.col("system") == "bm25")).sort("rank")["cand_id"]
    assert pq["value"][0] == (1.0 if "s:7" in ranked.to_list()[:5] else 0.0)


# ----------------------------------------------------------------------------- pooling
def test_pool_is_exactly_the_unrated_union_of_top_k():
    rng = np.random.default_rng(3)
    rows = []
    for system in ("a", "b", "c"):
        for rep in ("statement", "full"):
            for q in ("q1", "q2", "q3"):
                for rank, d in enumerate(rng.permutation(40)[:15], 1):
                    rows.append((system, rep, q, f"d{d}", rank, 1.0 / rank))
    runs = pl.DataFrame(rows, schema=["system", "representation", "query_id", "cand_id", "rank", "score"],
                        orient="row")
    rated = {(q, f"d{d}") for q in ("q1", "q2", "q3") for d in rng.permutation(40)[:12]}
    ratings = pl.DataFrame(sorted(rated), schema=["query_id", "cand_id"], orient="row").with_columns(rating=pl.lit(1))
    for depth in (1, 5, 10):
        union = {(q, d) for (_, _, q, d, rank, _) in rows if rank <= depth}
        expected = union - rated
        pool = pool_to_judge(runs, ratings, depth)
        assert set(pool.select("query_id", "cand_id").iter_rows()) == expected
        assert pool.height == len(expected)            # each pair once
        for q, d, n_sys, best in pool.iter_rows():
            hits = [(s, r, rank) for (s, r, qq, dd, rank, _) in rows if qq == q and dd == d and rank <= depth]
            assert n_sys == len({(s, r) for s, r, _ in hits})
            assert best == min(rank for *_, rank in hits)
        # judging the pool makes every run fully judged at that depth
        grown = pl.concat([ratings, pool.select("query_id", "cand_id").with_columns(rating=pl.lit(0))])
        assert pool_to_judge(runs, grown, depth).height == 0
    budget = pool_budget(runs, ratings, depths=(1, 5))
    assert budget["pairs"].to_list() == [pool_to_judge(runs, ratings, 1).height, pool_to_judge(runs, ratings, 5).height]


# ----------------------------------------------------------------------------- indexes
def test_bm25_index_scores_equal_the_retriever_fitted_on_the_corpus():
    corpus = _tiny_corpus()
    ids, texts, _ = representation_texts(corpus, "full")
    index = BM25Index.build(ids, texts)
    ref = BM25Retriever()
    for q in ("primes squared", "area of a triangle", "quadratic factor zero"):
        np.testing.assert_allclose(index.scores(q), ref.score(q, texts), rtol=1e-5, atol=1e-6)
        rows, vals = index.search([q], 3)
        s = ref.score(q, texts)
        expect = [i for i in np.lexsort((np.arange(len(s)), -s)) if s[i] > 0][:3]
        assert [r for r in rows[0] if r >= 0] == expect


def test_tfidf_index_scores_equal_the_retriever_fitted_on_the_corpus():
    corpus = _tiny_corpus()
    ids, texts, _ = representation_texts(corpus, "statement")
    index = TfidfIndex.build(ids, texts)
    q = "find the area of the triangle"
    s = TfidfRetriever().score(q, texts)
    rows, vals = index.search([q], len(texts))
    keep = rows[0] >= 0
    expect = [i for i in np.lexsort((np.arange(len(s)), -s)) if s[i] > 0]
    assert list(rows[0][keep]) == expect
    np.testing.assert_allclose(vals[0][keep], s[expect], rtol=1e-5)


def _unit(rng, n, d, centers=None):
    x = rng.standard_normal((n, d)).astype(np.float32)
    if centers is not None:
        x = centers[rng.integers(0, len(centers), n)] + 0.5 * x
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_exact_dense_matches_brute_force_across_chunks():
    rng = np.random.default_rng(0)
    X, Q = _unit(rng, 1000, 16), _unit(rng, 7, 16)
    ids = [str(i) for i in range(1000)]
    index = ExactDenseIndex(X, ids, chunk=97)          # many chunks to merge
    rows, vals = index.search(Q, 12)
    S = Q @ X.T
    for i in range(len(Q)):
        expect = np.lexsort((np.arange(1000), -S[i]))[:12]
        assert list(rows[i]) == list(expect)
        np.testing.assert_allclose(vals[i], S[i][expect], rtol=1e-5)


def test_hnsw_recall_against_exact_on_a_small_synthetic_case():
    rng = np.random.default_rng(1)
    centers = rng.standard_normal((40, 32)).astype(np.float32)
    X, Q = _unit(rng, 3000, 32, centers), _unit(rng, 100, 32, centers)
    ids = [str(i) for i in range(len(X))]
    exact, _ = ExactDenseIndex(X, ids).search(Q, 10)
    approx, sims = HnswIndex.build(ids, X, M=16, ef_construction=100, ef=64).search(Q, 10)
    recall = np.mean([len(set(a) & set(e)) / 10 for a, e in zip(approx, exact)])
    assert recall >= 0.95
    # the reported similarities are the true inner products
    for i in range(5):
        np.testing.assert_allclose(sims[i], X[approx[i]] @ Q[i], rtol=1e-4, atol=1e-5)


def test_cached_index_is_reused_and_rebuilt_when_the_corpus_changes(tmp_path):
    corpus = _tiny_corpus()
    ids, texts, _ = representation_texts(corpus, "statement")
    h = corpus_hash(ids, texts)
    before = BUILD_COUNTS["bm25"]
    a, info_a = cached_index(tmp_path, "bm25", "m", "statement", h, lambda: BM25Index.build(ids, texts))
    assert info_a["built"] and BUILD_COUNTS["bm25"] == before + 1
    meta = tmp_path / "open_corpus" / "bm25"
    mtime = {p: p.stat().st_mtime_ns for p in meta.rglob("*") if p.is_file()}
    b, info_b = cached_index(tmp_path, "bm25", "m", "statement", h,
                             lambda: pytest.fail("must not rebuild an index whose corpus is unchanged"))
    assert not info_b["built"] and BUILD_COUNTS["bm25"] == before + 1
    assert {p: p.stat().st_mtime_ns for p in meta.rglob("*") if p.is_file()} == mtime
    np.testing.assert_allclose(b.scores("primes"), a.scores("primes"))
    # one changed text: another hash, another folder, a new build
    texts2 = list(texts)
    texts2[0] = texts2[0] + " modulo"
    h2 = corpus_hash(ids, texts2)
    assert h2 != h
    c, info_c = cached_index(tmp_path, "bm25", "m", "statement", h2, lambda: BM25Index.build(ids, texts2))
    assert info_c["built"] and info_c["path"] != info_a["path"] and BUILD_COUNTS["bm25"] == before + 2
    assert c.scores("modulo")[0] > 0 and a.scores("modulo")[0] == 0


def test_run_reuses_the_cache_and_rebuilds_for_a_changed_corpus(tmp_path):
    corpus = _tiny_corpus()
    queries = pl.DataFrame({"query_id": ["s:1", "s:3"]})
    ratings = pl.DataFrame({"query_id": ["s:1"], "cand_id": ["s:7"], "rating": [4]})
    kw = dict(representations=["statement", "full"], cache_dir=tmp_path, ks=(1, 5), n_bootstrap=20)
    r1 = run_open_corpus(corpus, queries, ["bm25", "tfidf"], ratings, **kw)
    assert all(v["built"] for v in r1.info["indexes"].values())
    r2 = run_open_corpus(corpus, queries, ["bm25", "tfidf"], ratings, **kw)
    assert not any(v["built"] for v in r2.info["indexes"].values())
    assert r1.runs.equals(r2.runs)
    changed = corpus.with_columns(pl.when(pl.col("doc_id") == "s:8").then(pl.lit("Solve a cubic"))
                                  .otherwise(pl.col("problem")).alias("problem"))
    r3 = run_open_corpus(changed, queries, ["bm25", "tfidf"], ratings, **kw)
    assert all(v["built"] for v in r3.info["indexes"].values())


# ----------------------------------------------------------------------------- the track
class _LengthReranker(Retriever):
    """Prefers shorter candidates (an easy order to predict)."""

    name = "short"

    def score(self, query, candidates):
        return np.array([-len(c) for c in candidates], dtype=np.float64)


def test_two_stage_reorders_the_first_stage_top_n():
    corpus = _tiny_corpus()
    queries = pl.DataFrame({"query_id": ["s:1"]})
    ratings = pl.DataFrame({"query_id": ["s:1"], "cand_id": ["s:7"], "rating": [4]})
    kw = dict(representations=["statement"], ks=(1, 5), n_bootstrap=20, first_stage_n=3)
    one = run_open_corpus(corpus, queries, ["bm25"], ratings, **kw)
    two = run_open_corpus(corpus, queries, ["bm25>short"], ratings, rerankers={"short": _LengthReranker()}, **kw)
    first3 = one.runs.sort("rank")["cand_id"].to_list()[:3]
    text = dict(zip(corpus["doc_id"], corpus["problem"]))
    expect = sorted(first3, key=lambda d: (len(text[d]), first3.index(d)))
    assert two.runs.sort("rank")["cand_id"].to_list() == expect


def test_rerank_keeps_first_stage_order_on_ties():
    class Flat(Retriever):
        def score(self, q, c):
            return np.zeros(len(c))
    out = rerank(Flat(), ["q"], ["x"], [["c", "a", "b"]], {"a": "", "b": "", "c": ""})
    assert [d for d, _ in out[0]] == ["c", "a", "b"]


def test_llm_reranker_scores_by_the_rating_and_failures_go_last():
    answers = {"alpha": "Rating: 4", "beta": "2", "gamma": ChatResult(error="timeout"), "delta": "no idea"}
    be = ScriptedBackend(lambda r: answers[r.messages[0]["content"].split("Candidate problem:")[1].split()[0]])
    rr = LLMPointwiseReranker(be, retries=0)
    s = rr.score("query", ["beta", "alpha", "gamma", "delta"])
    assert list(s) == [2.0, 4.0, -1.0, -1.0]
    assert len(be.seen) == 4 and rr.failures == 2


def test_an_unrated_answer_is_asked_again_and_never_cached(tmp_path):
    asked: dict = {}

    def first_garbage(r):            # "beta" answers without a rating the first time only
        cand = r.messages[0]["content"].split("Candidate problem:")[1].split()[0]
        asked[cand] = asked.get(cand, 0) + 1
        return "hmm" if cand == "beta" and asked[cand] == 1 else {"alpha": "4", "beta": "2"}[cand]

    db = tmp_path / "llm.sqlite"
    be1 = ScriptedBackend(first_garbage, cache=ResponseCache(db))
    rr1 = LLMPointwiseReranker(be1, retries=0)
    assert list(rr1.score("q", ["alpha", "beta"])) == [4.0, -1.0] and rr1.failures == 1
    be2 = ScriptedBackend(first_garbage, cache=ResponseCache(db))     # the rerun asks again for beta only
    rr2 = LLMPointwiseReranker(be2, retries=0)
    assert list(rr2.score("q", ["alpha", "beta"])) == [4.0, 2.0] and rr2.failures == 0
    assert (be2.usage()["calls"], be2.usage()["cached"]) == (1, 1) and asked == {"alpha": 1, "beta": 2}
    asked.clear()                                                      # with a retry: one run, no failure
    rr3 = LLMPointwiseReranker(ScriptedBackend(first_garbage), retries=1)
    assert list(rr3.score("q", ["alpha", "beta"])) == [4.0, 2.0] and rr3.failures == 0


def test_metrics_table_shape_and_judged_at_k():
    corpus = _tiny_corpus()
    queries = pl.DataFrame({"query_id": ["s:1", "s:5"]})
    ratings = pl.DataFrame({"query_id": ["s:1", "s:1", "s:5", "s:5"], "cand_id": ["s:7", "s:2", "s:1", "s:4"],
                            "rating": [4, 5, 3, 0]})
    res = run_open_corpus(corpus, queries, ["bm25", "tfidf"], ratings, representations=["statement", "full"],
                          ks=(1, 5, 10), n_bootstrap=50)
    m = res.metrics
    assert m.columns[:8] == ["system", "representation", "metric", "k", "mean", "ci_low", "ci_high", "judged_at_k"]
    assert set(m["metric"]) == {"hit", "recall", "mrr", "ndcg"}
    assert m.height == 2 * 2 * (3 * 3 + 1)
    assert (m["ci_low"] <= m["mean"] + 1e-12).all() and (m["mean"] <= m["ci_high"] + 1e-12).all()
    rated = {(q, c) for q, c in ratings.select("query_id", "cand_id").iter_rows()}
    for (s, r), g in res.runs.group_by(["system", "representation"]):
        top = [(q, c) for q, c, rank in g.select("query_id", "cand_id", "rank").iter_rows() if rank <= 5]
        share = np.mean([sum((q, c) in rated for qq, c in top if qq == q) / 5 for q in ("s:1", "s:5")])
        row = m.filter((pl.col("system") == s) & (pl.col("representation") == r) & (pl.col("metric") == "hit")
                       & (pl.col("k") == 5))
        assert row["judged_at_k"][0] == pytest.approx(share)
    assert set(res.pool.select("query_id", "cand_id").iter_rows()).isdisjoint(rated)


def test_summary_representation_falls_back_to_the_statement():
    corpus = _tiny_corpus()
    summ = pl.DataFrame({"doc_id": ["s:1", "s:2", "s:3"], "text": ["primes mod three", None, "  "]})
    ids, texts, fallback = representation_texts(corpus, "summary", summ)
    assert texts[0] == "primes mod three" and texts[1] == corpus["problem"][1] and fallback == 7
    with pytest.raises(ValueError):
        representation_texts(corpus, "summary")


def test_dense_exact_and_hnsw_systems_share_cached_vectors(tmp_path):
    from saber_lib import embed

    try:
        embed.get_encoder("paraphrase-minilm-l3")
    except embed.EncoderUnavailable as e:
        pytest.skip(str(e))
    corpus = _tiny_corpus()
    queries = pl.DataFrame({"query_id": ["s:1", "s:3", "s:8"]})
    ratings = pl.DataFrame({"query_id": ["s:1"], "cand_id": ["s:7"], "rating": [4]})
    store = embed.EmbeddingStore(tmp_path)
    kw = dict(cache_dir=tmp_path, store=store, ks=(1, 5), n_bootstrap=20, representations=["statement", "full"],
              system_representations={"paraphrase-minilm-l3@hnsw": ["statement"]})
    systems = ["paraphrase-minilm-l3", "paraphrase-minilm-l3@hnsw", "bm25>paraphrase-minilm-l3"]
    before = dict(BUILD_COUNTS)
    r1 = run_open_corpus(corpus, queries, systems, ratings, **kw)
    assert BUILD_COUNTS["dense-exact"] == before.get("dense-exact", 0) + 2       # statement, full
    assert BUILD_COUNTS["dense-hnsw"] == before.get("dense-hnsw", 0) + 1
    assert set(r1.runs.filter(pl.col("system").str.ends_with("@hnsw"))["representation"]) == {"statement"}
    # on 8 documents the graph search is exact
    ex = r1.runs.filter((pl.col("system") == "paraphrase-minilm-l3") & (pl.col("representation") == "statement"))
    ap = r1.runs.filter(pl.col("system") == "paraphrase-minilm-l3@hnsw")
    assert ex.select("query_id", "cand_id", "rank").equals(ap.select("query_id", "cand_id", "rank"))
    # exact scores are the cosines of the stored vectors
    enc = embed.get_encoder("paraphrase-minilm-l3")
    text = dict(zip(corpus["doc_id"], corpus["problem"]))
    for q, c, s in ex.head(4).select("query_id", "cand_id", "score").iter_rows():
        v = embed.embed(enc, [text[q], text[c]], store)
        assert s == pytest.approx(float(v[0] @ v[1]), abs=1e-5)
    n_vectors = store.count()
    r2 = run_open_corpus(corpus, queries, systems, ratings, **kw)
    assert BUILD_COUNTS["dense-exact"] == before.get("dense-exact", 0) + 2
    assert store.count() == n_vectors
    assert r1.runs.equals(r2.runs)


def test_summary_frame_from_the_summaries_artifact():
    from saber_lib.open_corpus import summary_frame

    art = pl.DataFrame({"doc_id": ["s:1", "s:2"], "core_idea": ["mod three", "x"], "summary_text": ["primes mod", "y"],
                        "failed": [False, True]})
    assert summary_frame(art).rows() == [("s:1", "primes mod")]
    assert summary_frame(art, "core_idea").rows() == [("s:1", "mod three")]
    ids, texts, fallback = representation_texts(_tiny_corpus(), "summary", art)
    assert texts[:2] == ["primes mod", _tiny_corpus()["problem"][1]] and fallback == 7


def test_system_names():
    from saber_lib.open_corpus import parse_system

    assert parse_system("bm25") == ("bm25", None)
    assert parse_system("bm25>minilm") == ("bm25", "minilm")
    assert parse_system("minilm@hnsw>llm") == ("minilm@hnsw", "llm")
    for bad in ("bm25>", ">minilm", "a>b>c"):
        with pytest.raises(ValueError):
            parse_system(bad)


def test_approach0_index_agrees_with_the_retriever_and_is_cached(tmp_path):
    pytest.importorskip("pya0")
    from saber_lib.retrieval.indexes import Approach0Index
    from saber_lib.retrieval.registry import get_retriever

    docs = ["Solve $x^2 - 5x + 6 = 0$ for real $x$.", "Prove that $a^2 + b^2 \\ge 2ab$ for reals.",
            "Find the area of a circle of radius $r$.", "Show $\\sum_{k=1}^n k = n(n+1)/2$.",
            "Factor $x^2 - 5x + 6$ completely.", "Count the subsets of a set with $n$ elements."]
    ids = [f"d{i}" for i in range(len(docs))]
    h = corpus_hash(ids, docs)
    before = BUILD_COUNTS["approach0"]
    index, info = cached_index(tmp_path, "approach0", "pya0", "statement", h, lambda: Approach0Index.build(ids, docs))
    assert info["built"] and BUILD_COUNTS["approach0"] == before + 1
    q = "Find the roots of $x^2 - 5x + 6 = 0$"
    rows, vals = index.search([q], 4)
    ref = get_retriever("approach0").score(q, docs)
    got = [int(r) for r in rows[0] if r >= 0]
    assert got and got[0] in (0, 4)
    expect = [i for i in np.lexsort((np.arange(len(docs)), -ref)) if ref[i] > ref.min() or ref.min() > 0][: len(got)]
    assert got == expect
    again, info2 = cached_index(tmp_path, "approach0", "pya0", "statement", h,
                                lambda: pytest.fail("must be loaded from the cache"))
    assert not info2["built"]
    assert again.search([q], 4)[0].tolist() == rows.tolist()
