import numpy as np
import polars as pl
import pytest

from saber_lib.llm import FailureBudgetExceeded
from saber_lib.llm.testing import ScriptedBackend
from saber_lib.robustness.memorization import (evaluate_variants, flag_rule, memorization_probe,
                                               memorization_table, query_variants)
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


def test_the_probe_tests_with_the_shared_sign_flip_core():
    # one retriever whose excess drop over the control is +1 on 3 queries and -1 on 1: of the 16
    # sign patterns, |mean| >= 0.5 for the 2 all-equal ones and the 8 with three of one sign
    per_q = []
    for q, (orig, new) in zip("abcd", [(1.0, 0.0), (1.0, 0.0), (1.0, 0.0), (0.0, 1.0)]):
        per_q += [("r", "original", q, False, orig), ("r", "v", q, True, new),
                  ("bm25", "original", q, False, 0.5), ("bm25", "v", q, True, 0.5)]
    pq = pl.DataFrame(per_q, schema=["retriever", "variant", "query_id", "changed", "ndcg"], orient="row")
    t = memorization_table(pq, control="bm25", n_perm=16, n_boot=50)
    row = t.filter((pl.col("retriever") == "r") & (pl.col("variant") == "v")).row(0, named=True)
    assert row["excess_drop"] == pytest.approx(0.5) and row["p_value"] == pytest.approx(10 / 16)


def test_query_variants_mark_changes_and_rename_within_a_query():
    v = query_variants(CORPUS, QIDS, {"rename_variables": RenameVariables()})
    assert v.filter(pl.col("variant") == "original")["changed"].sum() == 0
    r = v.filter(pl.col("variant") == "rename_variables")
    assert r["changed"].all()
    q1 = r.filter(pl.col("query_id") == "q1").row(0, named=True)
    assert (q1["problem"], q1["solution"]) == ("Find $u$ with $u^2 = 4$.", "$u = 2$")


def test_a_memorizing_retriever_against_a_blind_control():
    rets = {"memorizer": Memorizer(), "blind": Blind()}
    kw = dict(rewriters={"rename_variables": RenameVariables()}, n_boot=200, control="blind")
    table, per_q, variants = memorization_probe(rets, CORPUS, RATINGS, alpha=0.1, **kw)
    mem = table.filter((pl.col("retriever") == "memorizer") & (pl.col("variant") == "rename_variables")).row(0, named=True)
    assert mem["n_queries"] == 6 and mem["ndcg_original"] == pytest.approx(1.0)
    assert mem["mean_drop"] > 0.3 and mem["lo"] <= mem["mean_drop"] <= mem["hi"]
    # the blind control loses nothing: the excess is the drop; 6 positive excesses: exact p = 2 / 2^6;
    # Holm over 2 tests (the variant and pooled, which equals it here) doubles it
    assert mem["control"] == "blind" and mem["control_drop"] == 0.0 and mem["excess_drop"] == mem["mean_drop"]
    assert mem["p_value"] == pytest.approx(2 / 64) and mem["p_adjusted"] == pytest.approx(4 / 64)
    assert mem["flagged"]                                          # 0.0625 < alpha 0.1
    strict = memorization_table(per_q, control="blind", n_boot=50, alpha=0.05)
    assert not strict["flagged"].any()                             # raw p 0.031 < 0.05, but not after Holm
    blind = table.filter(pl.col("retriever") == "blind")
    assert (blind["mean_drop"] == 0).all() and blind["p_value"].null_count() == 2 and not blind["flagged"].any()
    assert set(table["variant"]) == {"rename_variables", "pooled"}
    with pytest.raises(ValueError, match="robustness.mem_control: the control retriever 'bm25' is not among"):
        memorization_probe(rets, CORPUS, RATINGS, rewriters={"rename_variables": RenameVariables()})


def _planted(n_queries=12, seed=3):
    """Per-query nDCG of four retrievers on originals and one rewrite: every retriever loses what the
    control (bm25) loses from the changed words (a different amount per query); ``memorizer`` loses
    a planted 0.15 more; ``lexical`` only the control's drop plus zero-mean noise; ``robust`` less
    than the control."""
    rng = np.random.default_rng(seed)
    qids = [f"q{i:02d}" for i in range(n_queries)]
    orig = 0.6 + 0.3 * rng.random(n_queries)
    lexical_drop = 0.05 + 0.2 * rng.random(n_queries)
    noise = 0.01 * np.resize([1.0, -1.0], n_queries) * (1 + rng.random(n_queries))
    noise -= noise.mean()                                          # zero mean exactly
    drops = {"bm25": lexical_drop, "memorizer": lexical_drop + 0.15 + 0.02 * rng.random(n_queries),
             "lexical": lexical_drop + noise, "robust": 0.3 * lexical_drop}
    rows = []
    for r, d in drops.items():
        for q, o, x in zip(qids, orig, d):
            rows += [(r, "original", q, False, float(o)), (r, "rename_variables", q, True, float(o - x))]
    return pl.DataFrame(rows, schema={"retriever": pl.String, "variant": pl.String, "query_id": pl.String,
                                      "changed": pl.Boolean, "ndcg": pl.Float64}, orient="row")


def test_planted_memorization_is_flagged_and_a_lexical_drop_the_control_shows_is_not():
    per_q = _planted()
    t = memorization_table(per_q, control="bm25", n_perm=10000, n_boot=400, alpha=0.05)
    row = {(r["retriever"], r["variant"]): r for r in t.iter_rows(named=True)}
    mem, lex, rob = (row[(n, "rename_variables")] for n in ("memorizer", "lexical", "robust"))
    # all three lose nDCG on the rewrite; the uncontrolled drop of `lexical` is as clear as any
    assert lex["mean_drop"] > 0.05 and lex["lo"] > 0 and mem["lo"] > 0
    assert mem["excess_drop"] == pytest.approx(mem["mean_drop"] - mem["control_drop"], abs=1e-12)
    assert 0.15 <= mem["excess_drop"] <= 0.17 and mem["excess_lo"] > 0
    assert lex["excess_drop"] == pytest.approx(0.0, abs=1e-12)
    # exact sign-flip (2^12 patterns <= n_perm): 12 positive excesses give p = 2 / 4096
    assert mem["p_value"] == pytest.approx(2 / 4096)
    assert lex["p_value"] > 0.5 and rob["excess_drop"] < 0 and rob["p_value"] == pytest.approx(2 / 4096)
    # Holm over 6 tests (3 retrievers x (variant, pooled)); the 4 smallest p are 2/4096 (memorizer and
    # robust, each twice): 6p, then max(5p, 6p) ... = 6p for all four
    assert t["p_value"].is_not_null().sum() == 6
    for key in [("memorizer", "rename_variables"), ("memorizer", "pooled"), ("robust", "pooled")]:
        assert row[key]["p_adjusted"] == pytest.approx(6 * 2 / 4096)
    assert lex["p_adjusted"] == pytest.approx(min(1.0, 2 * lex["p_value"]))   # ranks 5 and 6 of 6
    flagged = {k for k, r in row.items() if r["flagged"]}
    assert flagged == {("memorizer", "rename_variables"), ("memorizer", "pooled")}   # robust: a negative excess
    assert row[("bm25", "pooled")]["p_value"] is None and not row[("bm25", "pooled")]["flagged"]
    rule = flag_rule(t, 0.05)
    assert "control: bm25" in rule and "Holm-adjusted over 6 tests" in rule and "adjusted p < 0.05" in rule


def test_holm_in_the_table_matches_a_hand_computation():
    # five queries: exact sign-flip p-values are multiples of 1/32, small enough to check by hand
    per_q = _planted(n_queries=5, seed=7)
    t = memorization_table(per_q, control="bm25", n_boot=50)
    tested = t.filter(pl.col("p_value").is_not_null()).sort("p_value", "retriever", "variant")
    p = tested["p_value"].to_list()
    m = len(p)
    want, running = [], 0.0
    for i, x in enumerate(p):                                      # Holm: (m - i) p_(i), running max, cap 1
        running = max(running, (m - i) * x)
        want.append(min(1.0, running))
    np.testing.assert_allclose(tested["p_adjusted"].to_list(), want, rtol=0, atol=1e-15)
    assert p[0] == pytest.approx(2 / 32)                           # memorizer: all five excesses positive


def test_unchanged_queries_are_left_out():
    corpus = CORPUS.with_columns(pl.when(pl.col("doc_id") == "q2").then(pl.lit("No symbols here."))
                                 .otherwise(pl.col("problem")).alias("problem"),
                                 pl.when(pl.col("doc_id") == "q2").then(pl.lit("")).otherwise(pl.col("solution"))
                                 .alias("solution"))
    v = query_variants(corpus, QIDS, {"rename_variables": RenameVariables()})
    per_q = evaluate_variants({"blind": Blind()}, v, corpus, RATINGS)
    assert per_q.height == 12
    t = memorization_table(per_q, control="blind", n_boot=50)
    assert t.filter(pl.col("variant") == "rename_variables")["n_queries"][0] == 5


def test_paraphrases_that_fail_past_the_budget_stop_the_probe():
    # q1 and q3 have a problem and a solution, the others a problem alone: 9 non-empty texts
    def only_problems_with_x(req):            # an empty answer is a failed paraphrase
        t = req.messages[-1]["content"]
        return t.upper() if "x" in t else ""

    kept = query_variants(CORPUS, QIDS, {}, ScriptedBackend(only_problems_with_x), llm_retries=0)
    para = kept.filter(pl.col("variant") == "llm_paraphrase")
    assert para["changed"].to_list() == [True, True, False, False, False, False]   # without a budget: counted, kept
    with pytest.raises(FailureBudgetExceeded, match=r"robustness \(LLM paraphrase\): 6 of 9 LLM requests failed"):
        query_variants(CORPUS, QIDS, {}, ScriptedBackend(only_problems_with_x), llm_retries=0, max_failure_rate=0.5)
    ok = query_variants(CORPUS, QIDS, {}, ScriptedBackend(only_problems_with_x), llm_retries=0, max_failure_rate=0.7)
    assert ok.filter(pl.col("variant") == "llm_paraphrase")["changed"].sum() == 2
