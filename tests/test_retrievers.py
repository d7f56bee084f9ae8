"""Retrievers: BM25 vs a direct bm25s call, TF-IDF vs scikit-learn, Jaccard by hand, Approach Zero
on a handful of documents, dense scoring through the store, TREC run import and the settings."""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from saber_lib.evaluate.stage import score_benchmark
from saber_lib.retrieval.approach0 import ApproachZeroRetriever, split_query_math, to_imath
from saber_lib.retrieval.base import EmptyVocabulary
from saber_lib.retrieval.lexical import BM25Retriever, JaccardRetriever, TfidfRetriever
from saber_lib.retrieval.registry import get_retriever
from saber_lib.core.text import document_text, setting_texts
from saber_lib.retrieval.runs import TrecRunError, read_qrels, read_trec_run, write_trec_run

DOCS = [
    "Solve $x^2+2x+1=0$ by factoring the quadratic polynomial.",
    "Find the area of a circle of radius $r$; the answer is $\\pi r^2$.",
    "Prove that $a^2+b^2 \\ge 2ab$ for all real numbers using a square.",
    "Count the subsets of a set with $n$ elements: there are $2^n$ subsets.",
    "The quadratic $x^2-5x+6$ factors as $(x-2)(x-3)$ so its roots are 2 and 3.",
]
QUERY = "Factor the quadratic polynomial $x^2+2x+1$ and find its roots."


def test_bm25_matches_direct_bm25s_call():
    import bm25s

    got = BM25Retriever(k1=1.2, b=0.6).score(QUERY, DOCS)
    model = bm25s.BM25(k1=1.2, b=0.6)
    model.index(bm25s.tokenize(DOCS, stopwords="en", show_progress=False), show_progress=False)
    q = bm25s.tokenize([QUERY], stopwords="en", return_ids=False, show_progress=False)[0]
    want = model.get_scores([t for t in q if t in model.vocab_dict])
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert np.argmax(got) in (0, 4) and got[2] == 0.0 and got[3] == 0.0


def test_bm25_formula_on_a_tiny_case():
    # Lucene BM25, two docs, query "cat": df=1, N=2, idf = ln(1 + (2-1+0.5)/(1+0.5)) = ln 2,
    # score = idf * tf / (tf + k1 (1 - b + b dl/avgdl))
    r = BM25Retriever(k1=1.5, b=0.75, tokenizer=str.split)
    s = r.score("cat", ["cat cat dog", "dog"])
    avgdl, dl, tf = 2.0, 3, 2
    want = np.log(2) * tf / (tf + 1.5 * (1 - 0.75 + 0.75 * dl / avgdl))
    np.testing.assert_allclose(s, [want, 0.0], rtol=1e-5)
    assert np.all(r.score("zebra", ["cat", "dog"]) == 0)      # no query token in the candidates


def test_tfidf_is_cosine_of_sklearn_vectors():
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.metrics.pairwise import cosine_similarity

    got = TfidfRetriever().score(QUERY, DOCS)
    v = TfidfVectorizer().fit(DOCS)
    want = cosine_similarity(v.transform([QUERY]), v.transform(DOCS)).ravel()
    np.testing.assert_allclose(got, want, atol=1e-12)


def test_tfidf_refuses_an_empty_vocabulary_instead_of_ranking_in_list_order():
    # no candidate has a token: all-zero scores would silently rank the list in its own order
    with pytest.raises(EmptyVocabulary, match="none of the 2 candidates has a token"):
        TfidfRetriever().score("x", ["", " "])
    # a tokenizer that drops everything does the same; score_many names the query
    drop_all = TfidfRetriever(tokenizer=lambda text: [])
    with pytest.raises(EmptyVocabulary, match=r"^query q2: tfidf: none of the 1 candidates"):
        drop_all.score_many(["a", "b"], [[], ["some text"]], query_ids=["q1", "q2"])
    assert TfidfRetriever().score("zebra", ["cat", "dog"]).tolist() == [0.0, 0.0]  # a vocabulary, no overlap: fine


def test_jaccard_by_hand():
    s = JaccardRetriever().score("prime numbers modulo", ["prime numbers", "modulo arithmetic primes", ""])
    # tokens: {prime, numbers, modulo} vs {prime, numbers}: 2/3; vs {modulo, arithmetic, primes}: 1/5
    np.testing.assert_allclose(s, [2 / 3, 1 / 5, 0.0])


def test_split_query_math_and_imath():
    maths, words = split_query_math("Let $x^2$ be $$y+1$$ and \\(z\\); find x^2 area.")
    assert maths == ["x^2", "y+1", "z"]
    assert "area" in words and "let" not in words and "find" not in words
    assert "[imath]a+b[/imath]" in to_imath("so $a+b$ holds")


def test_approach_zero_on_a_handful_of_documents():
    r = ApproachZeroRetriever()
    s = r.score("Simplify $x^2+2x+1$ by factoring", DOCS + ["Nothing mathematical at all here."])
    assert s.shape == (6,)
    assert int(np.argmax(s)) == 0                 # the document with the same expression
    assert s[5] < s[:5].min()                     # not returned -> below every returned one
    # words only
    s2 = r.score("circle radius area", DOCS)
    assert int(np.argmax(s2)) == 1


def test_dense_retriever_scores_are_cosines(tmp_path):
    from saber_lib import embed

    store = embed.EmbeddingStore(tmp_path)
    r = get_retriever("minilm", store=store)
    out = r.score_many([QUERY, "circle area"], [DOCS, DOCS[:2]])
    enc = embed.get_encoder("minilm")
    q = enc.encode([QUERY], kind="query")[0]
    np.testing.assert_allclose(out[0], enc.encode(DOCS) @ q, atol=1e-5)
    assert out[1].shape == (2,) and out[1][1] > out[1][0]
    n = store.count()
    assert n == len(DOCS) + 2                       # every distinct text embedded once
    r.score_many([QUERY], [DOCS])
    assert store.count() == n


def test_trec_run_import(tmp_path):
    p = tmp_path / "sys.run"
    p.write_text("q1 Q0 a 1 3.5 sys\nq1 Q0 c 2 1.0 sys\n\nq2 Q0 d 1 0.2 sys\n")
    run = read_trec_run(p)
    assert run.shape == (3, 5) and run["score"].to_list() == [3.5, 1.0, 0.2]
    r = get_retriever(f"run:{p}")
    s = r.score_many(["", ""], [["a", "b", "c"], ["d", "e"]], query_ids=["q1", "q2"],
                     candidate_ids=[["a", "b", "c"], ["d", "e"]])
    np.testing.assert_allclose(s[0], [3.5, -1.0, 1.0])   # b missing: min(0, 1.0) - 1
    assert s[1][1] < s[1][0]
    bad = tmp_path / "bad.run"
    bad.write_text("q1 Q0 a 1 3.5 sys\nq1 Q0 b one 2 sys\n")
    with pytest.raises(TrecRunError, match=r"bad.run:2"):
        read_trec_run(bad)
    dup = tmp_path / "dup.run"
    dup.write_text("q1 Q0 a 1 3.5 sys\nq1 Q0 a 2 2 sys\n")
    with pytest.raises(TrecRunError, match=r"dup.run:2.*twice"):
        read_trec_run(dup)
    # round trip through the writer
    df = pl.DataFrame({"query_id": ["q1", "q1", "q1"], "cand_id": ["x", "y", "z"], "score": [0.1, 0.9, 0.1]})
    write_trec_run(df, tmp_path / "out.run")
    back = read_trec_run(tmp_path / "out.run")
    assert back["cand_id"].to_list() == ["y", "x", "z"] and back["rank"].to_list() == [1, 2, 3]


def test_settings_and_score_benchmark():
    assert setting_texts("statement-full", "P", "S") == ("P", "Problem: P\n\nSolution: S")
    assert setting_texts("full-full", "P", "S") == ("Problem: P\n\nSolution: S",) * 2
    assert setting_texts("statement-statement", "P", None) == ("P", "P")
    assert document_text("P", "") == "Problem: P"
    with pytest.raises(ValueError):
        setting_texts("nope", "P", "S")
    corpus = pl.DataFrame({"doc_id": ["q", "a", "b"], "problem": ["cats", "cats and dogs", "birds"],
                           "solution": ["meow", None, "tweet"]})
    bench = pl.DataFrame({"query_id": ["q", "q"], "cand_id": ["b", "a"], "position": [1, 0]})
    out = score_benchmark(JaccardRetriever(), bench, corpus, "statement-statement")
    assert out["cand_id"].to_list() == ["a", "b"]
    np.testing.assert_allclose(out["score"].to_numpy(), [1 / 2, 0.0])  # {cats} vs {cats, dogs}
    with pytest.raises(KeyError, match="not in the corpus"):
        score_benchmark(JaccardRetriever(), bench.with_columns(pl.lit("zz").alias("cand_id")), corpus,
                          "statement-full")
    with pytest.raises(KeyError, match="unknown retriever"):
        get_retriever("nope")


def test_export_beir_layout_and_grades(tmp_path):
    import json

    from saber_lib.evaluate import export

    np.testing.assert_array_equal(export.rating_to_grade([0, 0.49, 0.5, 2.5, 4.51, 5.0]), [0, 0, 1, 3, 5, 5])
    corpus = pl.DataFrame({"doc_id": ["q", "a", "b"], "problem": ["Q?", "A?", "B?"], "solution": ["qs", "as", None]})
    ratings = pl.DataFrame({"query_id": ["q", "q"], "cand_id": ["b", "a"], "rating": [4.6, 0.2]})
    info = export.export_beir(tmp_path / "beir", ratings, corpus)
    assert info["queries"] == 1 and info["corpus"] == 2 and info["qrels"] == 2
    queries = [json.loads(x) for x in (tmp_path / "beir" / "queries.jsonl").read_text().splitlines()]
    docs = [json.loads(x) for x in (tmp_path / "beir" / "corpus.jsonl").read_text().splitlines()]
    assert queries == [{"_id": "q", "text": "Q?"}]
    assert docs[0] == {"_id": "a", "title": "", "text": "Problem: A?\n\nSolution: as"}
    assert docs[1]["text"] == "Problem: B?"
    assert read_qrels(tmp_path / "beir" / "qrels" / "test.tsv") == {"q": {"a": 0, "b": 5}}
    # TREC import onto the benchmark's candidate lists
    (tmp_path / "x.run").write_text("q Q0 b 1 2.0 ext\n")
    bench = pl.DataFrame({"query_id": ["q", "q"], "cand_id": ["a", "b"], "position": [0, 1]})
    sc = export.import_trec_run(tmp_path / "x.run", bench, name="ext")
    assert sc["score"].to_list() == [-1.0, 2.0] and set(sc["retriever"]) == {"ext"}
