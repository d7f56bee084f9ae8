"""Math vs words as the authors count it: ties out of the denominator (or in it), the number of ties
in the caption, and the candidates' LaTeX normalized by the same LLM step as the queries'."""
import polars as pl
import pytest

from saber_lib.studies import math_words as mw
from saber_lib.studies import mvw_candidates


def _per_query(outcomes):
    return pl.DataFrame({"retriever": ["r"] * len(outcomes), "query_id": [f"q{i}" for i in range(len(outcomes))],
                         "s_math": [0.0] * len(outcomes), "s_words": [0.0] * len(outcomes), "outcome": outcomes})


def _kept(n, doms):
    return pl.DataFrame({"query_id": [f"q{i}" for i in range(n)], "query_domains": doms},
                        schema={"query_id": pl.String, "query_domains": pl.List(pl.String)})


def test_ties_change_the_share_by_hand():
    # q0 math, q1 words, q2 tie, q3 tie (Algebra: q0, q2; Geometry: q1, q3)
    per = _per_query(["math", "words", "tie", "tie"])
    kept = _kept(4, [["Algebra"], ["Geometry"], ["Algebra"], ["Geometry"]])
    exc = {d: (n, m, w, t) for _, d, n, m, w, t in mw.preference_table(per, kept, "exclude").iter_rows()}
    inc = {d: (n, m, w, t) for _, d, n, m, w, t in mw.preference_table(per, kept, "include").iter_rows()}
    assert exc["All"] == (4, 50.0, 50.0, 2)          # 1 of the 2 decided queries
    assert inc["All"] == (4, 25.0, 25.0, 2)          # 1 of 4, ties for neither side
    assert exc["Algebra"] == (2, 100.0, 0.0, 1) and inc["Algebra"] == (2, 50.0, 0.0, 1)
    assert exc["Geometry"] == (2, 0.0, 100.0, 1)


def test_a_scope_where_every_query_ties_has_no_share_when_ties_are_excluded():
    per = _per_query(["tie", "tie"])
    t = mw.preference_table(per, _kept(2, [["Algebra"], ["Algebra"]]), "exclude")
    assert t["math_wins_pct"].to_list() == [None, None] and t["ties"].to_list() == [2, 2]
    with pytest.raises(ValueError, match="math_vs_words.ties"):
        mw.preference_table(per, _kept(2, [[], []]), "drop")


def test_ties_note_counts_per_retriever():
    per = pl.concat([_per_query(["math", "tie", "tie"]),
                     _per_query(["words", "math", "math"]).with_columns(pl.lit("b").alias("retriever"))])
    pref = mw.preference_table(per, _kept(3, [[], [], []]), "exclude")
    note = mw.ties_note(pref, "exclude")
    assert "b 0, r 2" in note and "left out of the denominator" in note
    assert "neither side" in mw.ties_note(pref, "include")


def test_candidates_are_normalized_with_the_queries_llm_step():
    from saber_lib.llm.testing import ScriptedBackend

    answers = {"radius r is 5": "<formatted>radius $r$ is $5$</formatted>",
               "so area is pi r^2": "<formatted>so area is $pi r^2$</formatted>",
               "untouched q": "<formatted>untouched q</formatted>"}

    def respond(req):
        content = req.messages[1]["content"]
        return next(ans for text, ans in answers.items() if f"<text>\n{text}\n</text>" in content)

    corpus = pl.DataFrame({"doc_id": ["c1", "c2", "q"], "problem": ["radius r is 5", "no math", "untouched q"],
                           "solution": ["so area is pi r^2", None, "sol"], "source": ["a", "b", "c"]})
    bench = pl.DataFrame({"query_id": ["q", "q"], "cand_id": ["c1", "c2"]})
    same, facts = mvw_candidates.normalized_corpus(corpus, bench, None)
    assert same.equals(corpus) and facts == {}
    answers["no math"] = "no tags"                   # rejected twice: deterministic normalization
    out, facts = mvw_candidates.normalized_corpus(corpus, bench, ScriptedBackend(respond), retries=1)
    assert out.columns == corpus.columns
    rows = {r["doc_id"]: (r["problem"], r["solution"]) for r in out.iter_rows(named=True)}
    assert rows == {"c1": ("radius $r$ is $5$", "so area is $pi r^2$"), "c2": ("no math", None),
                    "q": ("untouched q", "sol")}     # the query's own row is not a candidate here
    assert facts == {"candidate_texts": 3, "candidate_format_failures": 1}
