import numpy as np
import polars as pl
import pytest

from saber_lib.robustness.memorization import (evaluate_variants, memorization_probe, memorization_table,
                                               query_variants, sign_flip_test)
from saber_lib.robustness.rewriters import RenameVariables

CORPUS = pl.DataFrame({
    "doc_id": ["q1", "q2", "q3", "q4", "q5", "q6", "c1", "c2", "c3", "c4"],
    "problem": ["Find $x$ with $x^2 = 4$.", "If $y = 2x$ and $x = 1$, find $y$.", "Solve $a + b = 3$ for $a$.",
                "Let $n$ be even. Find $n \\bmod 2$.", "Compute $p + q$ when $p = q = 1$.",
                "Show $t^3 \\ge 0$ for $t \\ge 0$.", "Cand one $z$.", "Cand two.", "Cand three $w$.", "Cand four."],
    "solution": ["$x = 2$", "", "$a = 3 - b$", "", "$2$", "", "", "", "", ""],
})
QIDS = ["q1", "q2", "q3", "q4", "q5", "q6"]
RATINGS = pl.DataFrame({"query_id": [q for q in QIDS for _ in range(4)],
                        "cand_id": ["c1", "c2", "c3", "c4"] * 6,
                        "position": [0, 1, 2, 3] * 6,
                        "rating": [5.0, 0.0, 3.0, 1.0] * 6})
ORIGINAL = {t for t in CORPUS.filter(pl.col("doc_id").is_in(QIDS))["problem"]}


class Memorizer:
    """Ranks perfectly when it sees a query's original wording, backwards otherwise."""
    name = "memorizer"

    def score(self, query, candidates):
        good = np.array([5.0, 0.0, 3.0, 1.0])
        return good if query in ORIGINAL else -good


class Blind:
    """Ignores the query: the same scores for any wording."""
    name = "blind"

    def score_many(self, queries, candidate_lists, query_ids=None, candidate_ids=None):
        return [np.array([len(c) for c in cl], dtype=float) for cl in candidate_lists]


def test_sign_flip_test_exact_and_sampled():
    # all four differences positive: of the 16 sign patterns only all+ and all- reach |mean| = 1
    assert sign_flip_test([1, 1, 1, 1]) == pytest.approx(2 / 16)
    assert sign_flip_test([0, 0, 0]) == 1.0
    # observed mean 0: every sign pattern is at least as extreme, p = 1
    assert sign_flip_test([1, -1]) == 1.0
    d = np.full(40, 0.1)
    p = sign_flip_test(d, n_perm=2000, seed=1)
    assert p == pytest.approx(1 / 2001)  # no random pattern of 40 signs reaches all-equal signs here
    assert sign_flip_test(np.r_[d, -d], n_perm=500, seed=1) == 1.0


def test_query_variants_mark_changes_and_rename_within_a_query():
    v = query_variants(CORPUS, QIDS, {"rename_variables": RenameVariables()})
    assert v.filter(pl.col("variant") == "original")["changed"].sum() == 0
    r = v.filter(pl.col("variant") == "rename_variables")
    assert r["changed"].all()
    q1 = r.filter(pl.col("query_id") == "q1").row(0, named=True)
    assert (q1["problem"], q1["solution"]) == ("Find $u$ with $u^2 = 4$.", "$u = 2$")


def test_a_memorizing_retriever_is_flagged_and_a_blind_one_is_not():
    table, per_q, variants = memorization_probe({"memorizer": Memorizer(), "blind": Blind()}, CORPUS, RATINGS,
                                                rewriters={"rename_variables": RenameVariables()}, n_boot=200)
    mem = table.filter((pl.col("retriever") == "memorizer") & (pl.col("variant") == "rename_variables")).row(0, named=True)
    assert mem["n_queries"] == 6 and mem["ndcg_original"] == pytest.approx(1.0)
    assert mem["mean_drop"] > 0.3 and mem["lo"] <= mem["mean_drop"] <= mem["hi"]
    assert mem["p_value"] == pytest.approx(2 / 64) and mem["flagged"]
    blind = table.filter(pl.col("retriever") == "blind")
    assert (blind["mean_drop"] == 0).all() and (blind["p_value"] == 1.0).all() and not blind["flagged"].any()
    assert set(table["variant"]) == {"rename_variables", "pooled"}


def test_unchanged_queries_are_left_out():
    corpus = CORPUS.with_columns(pl.when(pl.col("doc_id") == "q2").then(pl.lit("No symbols here."))
                                 .otherwise(pl.col("problem")).alias("problem"),
                                 pl.when(pl.col("doc_id") == "q2").then(pl.lit("")).otherwise(pl.col("solution"))
                                 .alias("solution"))
    v = query_variants(corpus, QIDS, {"rename_variables": RenameVariables()})
    per_q = evaluate_variants({"blind": Blind()}, v, corpus, RATINGS)
    assert per_q.height == 12
    t = memorization_table(per_q, n_boot=50)
    assert t.filter(pl.col("variant") == "rename_variables")["n_queries"][0] == 5
