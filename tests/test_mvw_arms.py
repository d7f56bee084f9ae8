"""Math vs words per instruction arm: the arm's text reaches both parts of the query (never the
candidates), shares and ties are counted per arm, lexical retrievers are the controls."""
import numpy as np
import polars as pl
import pytest

from saber_lib.embed.instructions import instructed
from saber_lib.studies import math_words as mw
from saber_lib.studies import mvw_arms

# q1: math "$y$" {y}, words "technique" {technique}; candidates "technique", "y", both in the top 2.
#   p0: math (0 + 1) / 2 = words (1 + 0) / 2: a tie.
#   p3 ("Find problems solved with the same mathematical technique."): both parts gain the template's
#   words; "technique" is new to the math part only (a set overlap counts it once), so math 1.0 > words .5.
# q2: math "$z$", words "count"; top candidate "count": words win under both arms.
KEPT = pl.DataFrame({"query_id": ["q1", "q2"], "query_domains": [["Algebra"], ["Algebra", "Geometry"]],
                     "math_text": ["$y$", "$z$"], "words_text": ["technique", "count"],
                     "n_math_tokens": [1, 1], "n_word_tokens": [1, 1]})
CANDS = {"q1": ["technique", "y"], "q2": ["count", "other"]}
TOP = {"q1": [0, 1], "q2": [0]}


def overlap(query, cands):
    q = set(mw.word_tokens(query))
    return np.array([len(q & set(mw.word_tokens(c))) for c in cands], dtype=float)


def test_per_arm_shares_and_ties_by_hand():
    per = mvw_arms.compare_by_arm(KEPT, CANDS, TOP, {"bm25": overlap, "minilm": overlap}, ["p0", "p3"])
    got = {(a, r, q): o for a, r, q, o in per.select("arm", "retriever", "query_id", "outcome").iter_rows()}
    assert got[("p0", "bm25", "q1")] == "tie" and got[("p3", "bm25", "q1")] == "math"
    assert got[("p0", "bm25", "q2")] == got[("p3", "bm25", "q2")] == "words"
    pref = mvw_arms.arm_preferences(per, KEPT, "exclude")
    allq = {(r, a): (p, t) for r, a, p, t in pref.filter(pl.col("domain") == "All")
            .select("retriever", "arm", "math_wins_pct", "ties").iter_rows()}
    assert allq[("bm25", "p0")] == (0.0, 1) and allq[("bm25", "p3")] == (50.0, 0)
    geo = pref.filter((pl.col("domain") == "Geometry") & (pl.col("retriever") == "bm25"))
    assert geo.select("arm", "math_wins_pct", "ties").rows() == [("p0", 0.0, 0), ("p3", 0.0, 0)]
    assert set(pref.select("retriever", "model_class", "role").unique().rows()) == {
        ("bm25", "lexical", "control"), ("minilm", "dense encoder", "control")}
    inc = mvw_arms.arm_preferences(per, KEPT, "include").filter(pl.col("domain") == "All")
    assert inc.filter(pl.col("retriever") == "bm25")["math_wins_pct"].to_list() == [0.0, 50.0]
    wide = mvw_arms.arm_wide(pref)
    assert wide.columns == ["retriever", "role", "model_class", "n", "p0", "p0 ties", "p3", "p3 ties"]
    assert wide.filter(pl.col("retriever") == "bm25").row(0) == ("bm25", "control", "lexical", 2, 0.0, 1, 50.0, 0)
    assert "ties per arm over all retrievers: p0 2, p3 0" in mvw_arms.arms_caption(pref, 5, "exclude")


def test_the_arm_reaches_both_query_parts_not_the_candidates_and_p0_is_reused():
    seen = []

    class Recording:          # a retriever: name, backend and score_many
        name, backend = "bm25", "recording"

        def score_many(self, queries, candidate_lists, query_ids=None, candidate_ids=None):
            seen.append((list(queries), [list(c) for c in candidate_lists]))
            return [np.zeros(len(c)) for c in candidate_lists]

    p0 = pl.DataFrame({"retriever": ["bm25"], "query_id": ["q1"], "s_math": [1.0], "s_words": [0.0],
                       "outcome": ["math"]})
    per = mvw_arms.compare_by_arm(KEPT, CANDS, TOP, {"bm25": Recording()}, ["p0", "p2"], p0=p0)
    assert per.filter(pl.col("arm") == "p0").drop("arm").equals(p0)          # not scored again
    assert [q for q, _ in seen] == [[instructed(t, "p2") for t in ("$y$", "$z$")],
                                    [instructed(t, "p2") for t in ("technique", "count")]]
    assert all(c == [CANDS["q1"], CANDS["q2"]] for _, c in seen)
    assert per.filter(pl.col("arm") == "p2")["outcome"].to_list() == ["tie", "tie"]
    with pytest.raises(KeyError, match="unknown instruction arm 'p7'"):
        mvw_arms.compare_by_arm(KEPT, CANDS, TOP, {"bm25": overlap}, ["p7"])
