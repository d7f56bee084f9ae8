"""A rephrased copy's rank: the mid-rank tie rule by hand, an identical copy first for lexical
retrievers (candidates and whole corpus, the query's own document left out), the summary by hand."""
import numpy as np
import polars as pl
import pytest

from saber_lib.evaluate import retrievers as R
from saber_lib.robustness import rephrased_rank as rr
from saber_lib.robustness.rewriters import default_rewriters

CORPUS = pl.DataFrame({
    "doc_id": ["q1", "q2", "a", "b", "c", "d"],
    "problem": ["Find all real roots of $x^3 - 6x^2 + 11x - 6 = 0$ using the rational root theorem.",
                "A triangle has sides 3, 4 and 5; find the radius of its inscribed circle.",
                "Compute the area of a square of side $7$.",
                "How many subsets does a set of $n$ elements have?",
                "Find the roots of the quadratic $x^2 - 5x + 6 = 0$.",
                "The inscribed circle of a right triangle touches its hypotenuse; find where."],
    "solution": ["Try 1, 2, 3.", "Use area over semiperimeter.", "49.", "2^n.", "2 and 3.", "Tangent lengths."]})
BENCH = pl.DataFrame({"query_id": ["q1"] * 4 + ["q2"] * 4, "cand_id": ["a", "b", "c", "d"] * 2,
                      "position": [0, 1, 2, 3] * 2})


def test_mid_rank_by_hand():
    assert rr.mid_rank(0.5, np.array([0.9, 0.5, 0.5, 0.1])) == 1 + 1 + 2 / 2      # one above, two tied
    assert rr.mid_rank(1.0, np.array([0.2, 0.3])) == 1.0
    assert rr.mid_rank(1.0, np.array([1.0])) == 1.5                               # a tie at the top is not first
    assert rr.mid_rank(0.0, np.zeros(4)) == 3.0                                   # all tied: the middle of 5


def test_summary_by_hand():
    per = pl.DataFrame({"retriever": ["r"] * 4, "pool": ["candidates"] * 4, "rewriter": ["w"] * 4,
                        "query_id": list("abcd"), "rank": [1.0, 3.0, 12.0, 2.0], "pool_size": [5] * 4})
    row = rr.rank_summary(per).row(0, named=True)
    assert {k: row[k] for k in ("retriever", "pool", "rewriter", "n_queries", "mean_rank", "median_rank", "top1",
                                "top10")} == {"retriever": "r", "pool": "candidates", "rewriter": "w", "n_queries": 4,
                                              "mean_rank": 4.5, "median_rank": 2.5, "top1": 0.25, "top10": 0.75}
    # the authors' readings by hand: ranks 1, 2, 3, 12; numpy's linear percentiles
    assert row["p90_rank"] == pytest.approx(3 + 0.7 * 9) and row["p99_rank"] == pytest.approx(3 + 0.97 * 9)
    assert row["trimmed_mean_95"] == pytest.approx((1 + 2 + 3) / 3)      # p95 = 10.65: the 12 is left out
    assert row["max_rank"] == 12.0
    assert [row[f"top{k}"] for k in (2, 4, 8, 16, 32, 64, 128)] == [0.5, 0.75, 0.75, 1.0, 1.0, 1.0, 1.0]
    assert list(row) == list(rr.SUMMARY)


def test_trimmed_mean_keeps_ties_at_the_cut():
    ranks = [1.0] * 19 + [5.0]                       # p95 = 1.2: the 5 goes, every 1 stays
    per = pl.DataFrame({"retriever": "r", "pool": "candidates", "rewriter": "w", "query_id": [str(i) for i in range(20)],
                        "rank": ranks, "pool_size": 5})
    v = np.asarray(ranks)
    assert rr.rank_summary(per)["trimmed_mean_95"][0] == pytest.approx(v[v <= np.percentile(v, 95)].mean())


def test_all_copies_inserted_ranks_the_copy_among_every_copy():
    per = rr.candidate_ranks({"bm25": R.get_retriever("bm25")}, _identical_copies(), CORPUS, BENCH,
                             "statement-statement", all_copies=True)
    assert per["pool"].to_list() == ["candidates_all"] * 2
    assert per["rank"].to_list() == [1.0, 1.0] and per["pool_size"].to_list() == [6, 6]   # 4 + own copy + the other
    # a copy of q2 identical to q1's copy: the two tie, so each is at mid-rank 1.5 once all copies are in
    twins = _identical_copies().with_columns(pl.lit(CORPUS["problem"][0]).alias("problem"),
                                             pl.lit(CORPUS["solution"][0]).alias("solution"))
    one = rr.candidate_ranks({"bm25": R.get_retriever("bm25")}, twins, CORPUS, BENCH, "statement-statement")
    every = rr.candidate_ranks({"bm25": R.get_retriever("bm25")}, twins, CORPUS, BENCH, "statement-statement",
                               all_copies=True)
    assert one.filter(pl.col("query_id") == "q1")["rank"][0] == 1.0
    assert every.filter(pl.col("query_id") == "q1")["rank"][0] == 1.5


def _identical_copies():
    return CORPUS.filter(pl.col("doc_id").is_in(["q1", "q2"])).select(
        pl.col("doc_id").alias("query_id"), "problem", "solution", pl.lit(True).alias("changed"))


@pytest.mark.parametrize("name", ["bm25", "tfidf", "jaccard", "bm25-a0", "tfidf-a0", "jaccard-ws"])
def test_an_identical_copy_ranks_first_among_the_candidates(name):
    per = rr.candidate_ranks({name: R.get_retriever(name)}, _identical_copies(), CORPUS, BENCH, "statement-statement")
    assert per["rank"].to_list() == [1.0, 1.0] and per["pool_size"].to_list() == [5, 5]


@pytest.mark.parametrize("system", ["bm25", "tfidf"])
def test_an_identical_copy_ranks_first_in_the_corpus_without_the_querys_own_document(system):
    per = rr.corpus_ranks([system], _identical_copies(), CORPUS, "statement-statement")
    assert per["rank"].to_list() == [1.0, 1.0]
    assert per["pool_size"].to_list() == [CORPUS.height, CORPUS.height]   # 5 other documents + the copy
    # the other query's copy is indexed but not ranked against: adding a document equal to q1 elsewhere
    # would tie with its copy (mid-rank 1.5), which shows the query's own row is the one left out
    dup = pl.concat([CORPUS, CORPUS.filter(pl.col("doc_id") == "q1").with_columns(pl.lit("q1-dup").alias("doc_id"))])
    assert rr.corpus_ranks([system], _identical_copies(), dup, "statement-statement")["rank"].to_list() == [1.5, 1.0]


def test_unchanged_queries_are_left_out_and_the_chain_is_named():
    every = default_rewriters()
    chain = rr.Chain([every["rename_variables"], every["sentence_order"]])
    assert chain.name == "rename_variables+sentence_order"
    copies, name = rr.rephrasings(CORPUS, ["q1", "q2"], chain)
    assert name == chain.name and copies.columns == ["query_id", "problem", "solution", "changed"]
    assert copies.filter(pl.col("query_id") == "q1")["changed"][0]           # x renamed
    per = rr.candidate_ranks({"bm25": R.get_retriever("bm25")}, copies, CORPUS, BENCH, "statement-statement")
    assert set(per["query_id"]) == set(copies.filter(pl.col("changed"))["query_id"])
