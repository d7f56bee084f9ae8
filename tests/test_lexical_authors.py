"""The authors' lexical baselines (saber_lib.retrieval.authors): their tokens on hand-made LaTeX strings, BM25
equal to rank_bm25's BM25Okapi, TF-IDF equal to scikit-learn on the same tokens, Jaccard by hand,
the whitespace variants, and the name map to the published systems."""
from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from conftest import PUBLISHED, needs_published

from saber_lib.retrieval import registry
from saber_lib.retrieval.authors import PUBLISHED_COUNTERPART, a0_tokens, math_blocks, ws_tokens
from saber_lib.retrieval.registry import get_retriever
from saber_lib.leaderboard import counterparts

AUTHORS_LEXICAL = ("bm25-a0", "tfidf-a0", "jaccard-a0", "bm25-ws", "tfidf-ws", "jaccard-ws")

# pya0 0.3.7's class ids (its tokenize returns (id, kind, text)): read off its lexer's output
VAR, NUM, ADD, EQ, SUP, FRAC, ROOT = "260", "259", "261", "271", "275", "265", "279"


# ----------------------------------------------------------------------------- tokens
def test_each_block_kind_becomes_class_ids_then_words():
    text = r"Let $x+1$ and $$\frac{a}{b}$$ with \(\sqrt{y}\) or \[z = 2\] Done"
    assert a0_tokens(text) == [VAR, ADD, NUM,            # $x+1$
                                 FRAC, VAR, VAR,           # $$\frac{a}{b}$$
                                 ROOT, VAR,                # \(\sqrt{y}\)
                                 VAR, EQ, NUM,             # \[z = 2\]
                                 "let", "and", "with", "or", "done"]


def test_the_id_quirk_erases_which_symbol_it_is():
    # every pya0 token is a tuple, so each becomes str(token[0]): formulas of one shape tie
    assert a0_tokens("$x^2+1$") == a0_tokens("$y^3+7$") == [VAR, SUP, NUM, ADD, NUM]
    assert a0_tokens(r"$a = b$") == a0_tokens(r"$a \le b$")


def test_tokens_equal_str_of_the_first_field_of_pya0s_tokens():
    import pya0

    block = r"\sum_{k=1}^{n} k^2 = \frac{n(n+1)(2n+1)}{6}"
    assert a0_tokens(f"${block}$") == [str(t[0]) for t in pya0.tokenize(block)]


def test_words_rules_no_stop_words_no_digits_no_math_leak():
    # stop words stay; "x2", "a_b" and "3rd" are not whole alphabetic words; case is folded;
    # the letters inside the math do not leak into the words; an apostrophe splits
    assert a0_tokens("The X2 and a_b of 3rd THE Don't $q$ is") == [VAR, "the", "and", "of", "the", "don", "t", "is"]


def test_double_dollars_win_and_an_empty_block_gives_no_token():
    assert math_blocks("$$x$$ then $y$") == ["x", "y"]
    assert a0_tokens("a $$ b") == ["a", "b"]         # "$$" is an empty $..$ block
    assert math_blocks("two\nlines $x\n+1$") == ["x\n+1"]


def test_whitespace_tokens():
    assert ws_tokens("Solve  $X^2$\nfor X.") == ["solve", "$x^2$", "for", "x."]
    assert ws_tokens("") == [] and a0_tokens("") == []


# ----------------------------------------------------------------------------- scores
DOCS = [
    r"Solve $x^2+2x+1=0$ by factoring the quadratic.",
    r"Find the area of a circle of radius $r$: it is $\pi r^2$.",
    r"Prove $a^2+b^2 \ge 2ab$ for all reals.",
    r"The quadratic $x^2-5x+6$ factors as $(x-2)(x-3)$.",
    "",
]
QUERY = r"Factor the quadratic $x^2+2x+1$."


def test_bm25_a0_equals_rank_bm25_on_the_same_tokens():
    from rank_bm25 import BM25Okapi

    got = get_retriever("bm25-a0").score(QUERY, DOCS)
    want = BM25Okapi([a0_tokens(d) for d in DOCS]).get_scores(a0_tokens(QUERY))
    np.testing.assert_allclose(got, want, rtol=0, atol=0)
    assert np.argmax(got) in (0, 3)


def test_bm25_ws_by_hand_with_the_negative_idf_floor():
    # N = 3; "cat" in 1 doc: idf = ln(2.5/1.5); "dog" in 2 docs: ln(1.5/2.5) < 0 -> eps * mean idf,
    # mean idf over {cat, dog, bird} = (ln(2.5/1.5) + ln(1.5/2.5) + ln(2.5/1.5)) / 3 = ln(2.5/1.5) / 3
    docs = ["Cat dog", "dog", "bird"]
    s = get_retriever("bm25-ws").score("cat DOG", docs)
    idf_cat = math.log(2.5 / 1.5)
    idf_dog = 0.25 * idf_cat / 3
    avgdl = 4 / 3

    def term(idf, tf, dl):
        return idf * tf * 2.5 / (tf + 1.5 * (1 - 0.75 + 0.75 * dl / avgdl))

    want = [term(idf_cat, 1, 2) + term(idf_dog, 1, 2), term(idf_dog, 1, 1), 0.0]
    np.testing.assert_allclose(s, want, rtol=1e-12)


def test_bm25_gives_zeros_without_query_tokens_or_document_tokens():
    assert np.all(get_retriever("bm25-ws").score("   ", ["a b", "c"]) == 0)
    assert np.all(get_retriever("bm25-a0").score("anything", ["", "  "]) == 0)
    assert get_retriever("bm25-a0").score("x", []).shape == (0,)


def test_tfidf_a0_and_ws_equal_scikit_learn():
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.metrics.pairwise import cosine_similarity

    v = TfidfVectorizer(tokenizer=a0_tokens, token_pattern=None, lowercase=False).fit(DOCS)
    want = cosine_similarity(v.transform([QUERY]), v.transform(DOCS)).ravel()
    np.testing.assert_allclose(get_retriever("tfidf-a0").score(QUERY, DOCS), want, atol=1e-12)
    v = TfidfVectorizer().fit(DOCS)     # the authors' TF-IDF without math tokens: scikit-learn's analyzer
    want = cosine_similarity(v.transform([QUERY]), v.transform(DOCS)).ravel()
    np.testing.assert_allclose(get_retriever("tfidf-ws").score(QUERY, DOCS), want, atol=1e-12)


def test_jaccard_a0_and_ws_by_hand():
    # query tokens {260, 261, 259, find} vs {260, 259, 271, find, it}: 3 shared of 6
    s = get_retriever("jaccard-a0").score("Find $x+1$", ["find $y=2$ it", ""])
    np.testing.assert_allclose(s, [3 / 6, 0.0])
    s = get_retriever("jaccard-ws").score("A b c", ["a B d", ""])
    np.testing.assert_allclose(s, [2 / 4, 0.0])
    assert get_retriever("jaccard-ws").score("", [""])[0] == 0.0     # empty union: 0 (the authors' rule)


def test_names_are_registered_for_the_profile_and_the_factory():
    for name in AUTHORS_LEXICAL:
        assert registry.retriever_name_error(name) is None
        r = get_retriever(name)
        assert r.name == name and r.backend
    assert set(AUTHORS_LEXICAL) <= set(registry.retriever_names())


# ----------------------------------------------------------------------------- the name map
def test_name_map_covers_every_retriever_and_pairs_with_the_published_rows():
    assert set(PUBLISHED_COUNTERPART) == set(AUTHORS_LEXICAL)
    assert len(set(PUBLISHED_COUNTERPART.values())) == len(AUTHORS_LEXICAL)
    lb = pl.DataFrame({"system": ["bm25", "bm25-a0", "tf-idf-no-tok", "minilm"], "task": ["t"] * 4,
                       "scope": ["Overall"] * 4, "mean": [0.40, 0.43, 0.35, 0.5]})
    pw = pl.DataFrame({"task": ["t", "t"], "a": ["bm25-a0", "minilm"], "b": ["bm25", "bm25"], "n_common": [9, 9],
                       "mean_diff": [0.03, 0.1], "p_value": [0.2, 0.01], "p_adjusted": [0.4, 0.03]})
    t = counterparts.counterpart_table(lb, pw, "t")
    assert t["retriever"].to_list() == ["bm25-a0", "tfidf-ws"]
    row = t.row(0, named=True)
    assert (row["published"], row["mean"], row["published_mean"], row["mean_diff"], row["n_common"]) == \
        ("bm25", 0.43, 0.40, 0.03, 9)
    row = t.row(1, named=True)
    assert row["published"] == "tf-idf-no-tok" and row["mean"] is None and row["mean_diff"] is None
    # the pair listed the other way round: the difference is still ours - published
    pw2 = pw.with_columns(pl.Series("a", ["bm25", "minilm"]), pl.Series("b", ["bm25-a0", "bm25"]))
    assert counterparts.counterpart_table(lb, pw2, "t")["mean_diff"][0] == pytest.approx(-0.03)


@needs_published
def test_published_names_in_the_map_are_the_authors_files():
    from saber_lib.leaderboard import published

    names = {s.name for s in published.read_published_dir(PUBLISHED).systems}
    assert {"bm25", "jaccard", "tf-idf-no-tok"} <= names
    assert names & set(PUBLISHED_COUNTERPART.values()) == {"bm25", "jaccard", "tf-idf-no-tok"}
