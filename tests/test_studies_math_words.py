"""Math vs words: the delimiter normalizer, the math/words splitter, tokens and the preference table."""
import numpy as np
import polars as pl
import pytest

from saber_lib.studies.latex_split import (Segment, is_empty_part, mask_figures, math_only, normalize_delimiters,
                                           plain_opening, split_math, unmask_figures, words_only)
from saber_lib.studies import math_words as mw


@pytest.mark.parametrize("src, want", [
    (r"Let \(x = 1\) and \[y^2\].", "Let $x = 1$ and $y^2$."),
    (r"Let $$x = 1$$ hold.", "Let $x = 1$ hold."),
    (r"mixed $a$ and $$b$$ and \(c\)", "mixed $a$ and $b$ and $c$"),
    (r"\begin{align*} a &= b \end{align*} done", "$a &= b$ done"),
    (r"It costs \$5 and \$7.", r"It costs \$5 and \$7."),           # escaped dollars stay text
    (r"It costs $5.", "It costs $5."),                                 # unclosed: plain text
    (r"no math at all", "no math at all"),
])
def test_normalize_delimiters(src, want):
    assert normalize_delimiters(src) == want
    assert normalize_delimiters(want) == want                        # idempotent


def test_split_on_delimiters():
    segs = split_math(r"If \(x>0\) then $$x^2>0$$, and \[y\] too")
    assert segs == [Segment("text", "If "), Segment("math", "x>0"), Segment("text", " then "),
                    Segment("math", "x^2>0"), Segment("text", ", and "), Segment("math", "y"),
                    Segment("text", " too")]


def test_escaped_dollars():
    t = r"Pay \$3 for $x$ apples, \$4 for $y$."
    assert math_only(t) == "$x$ $y$"
    assert words_only(t) == r"Pay \$3 for apples, \$4 for ."
    # inside math an escaped dollar is content, not a closer
    assert split_math(r"$\$5 + x$ ok") == [Segment("math", r"\$5 + x"), Segment("text", " ok")]
    # a double backslash is a line break: the dollar after it is a real delimiter
    assert math_only(r"a \\$z$") == "$z$"


def test_nested_dollars_inside_text_commands():
    t = r"Take $f(x) = 1 \text{ if $x>0$, else } 0$ and stop."
    assert split_math(t) == [Segment("text", "Take "),
                             Segment("math", r"f(x) = 1 \text{ if $x>0$, else } 0"),
                             Segment("text", " and stop.")]
    assert words_only(t) == "Take and stop."
    # adjacent inline segments are two segments, not a $$ display
    assert math_only("$a$$b$") == "$a$ $b$"


def test_text_with_no_math_and_empty_parts():
    t = "Find the number of ways to seat five people."
    assert math_only(t) == "" and is_empty_part(math_only(t))
    assert words_only(t) == t
    assert is_empty_part(words_only("$x^2 + 1$ .")) and not is_empty_part(math_only("$x^2 + 1$ ."))


def test_math_aware_tokens_use_approach_zero():
    toks = mw.math_aware_tokens("Show $x^2$ is even", stop_words=False)
    assert toks[:1] == ["show"] and toks[-2:] == ["is", "even"]
    mid = toks[1:-2]
    assert mid == ["$VAR:normal`x'", "$SUPSCRIPT:supscript", "$NUM:`2'"]
    assert mw.token_counts("Show $x^2$ is even") == (3, 3)
    assert "that" not in mw.math_aware_tokens("Show that $x$ is prime")   # stop words dropped by default


def test_lexical_scorers_match_math_through_approach_zero_tokens():
    sc = mw.make_scorers(["bm25", "tfidf", "jaccard"], k1=1.5, b=0.75)
    docs = [r"Problem: prove that $x^2 \ge 0$ for real numbers", "Problem: count the subsets of a set",
            "Problem: a triangle has area six"]
    for name, r in sc.items():
        m = r.score("$x^2$", docs)
        w = r.score("count subsets", docs)
        assert m[0] > m[1] and m[0] > m[2], name
        assert w[1] > w[0] and w[1] > w[2], name


def _queries():
    return pl.DataFrame({"query_id": ["q1", "q2", "q3", "q4"],
                         "query_domains": [["Algebra"], ["Algebra", "Geometry"], ["Geometry"], ["Algebra"]],
                         "text": ["Solve $x+1=2$ for real x.", r"Triangle \(ABC\) has $AB=3$.",
                                  "How many ways are there?", "$1+1$"]})


def test_split_queries_drops_and_counts():
    sq = mw.split_queries(_queries())
    assert sq.kept["query_id"].to_list() == ["q1", "q2"]
    assert dict(sq.dropped.iter_rows()) == {"q3": "no math", "q4": "no words"}
    assert sq.kept.height + sq.dropped.height == sq.n_queries


def test_compare_and_preference_table_hand_case():
    sq = mw.split_queries(_queries())
    docs = {"q1": ["x+1=2 solve", "unrelated", "solve real"], "q2": ["triangle", "AB=3", "other"]}
    top = {"q1": [0, 2], "q2": [0, 1]}

    def overlap(query, cands):  # a toy retriever: shared lowercase word tokens
        q = set(mw.word_tokens(query))
        return np.array([len(q & set(mw.word_tokens(c))) for c in cands], dtype=float)

    per = mw.compare_variants(sq.kept, docs, top, {"toy": overlap})
    got = {q: (m, w, o) for _, q, m, w, o in per.iter_rows()}
    # q1: math "$x+1=2$" tokens {x,1,2}: doc0 3, doc2 0 -> 1.5; words "Solve for real x." {solve,for,real,x}: doc0 2, doc2 2 -> 2
    assert got["q1"] == (1.5, 2.0, "words")
    # q2: math "$ABC$ $AB=3$" {abc,ab,3}: doc0 0, doc1 2 -> 1; words "Triangle has ." {triangle,has}: 1, 0 -> .5
    assert got["q2"] == (1.0, 0.5, "math")
    pref = mw.preference_table(per, sq.kept)
    row = {d: p for _, d, _, p, _, _ in pref.iter_rows()}
    assert row == {"All": 50.0, "Algebra": 50.0, "Geometry": 100.0}
    ratio = {d: r for d, _, _, _, r in mw.math_token_ratio(sq.kept).iter_rows()}
    m1, w1 = mw.token_counts(normalize_delimiters(_queries()["text"][0]))
    m2, w2 = mw.token_counts(normalize_delimiters(_queries()["text"][1]))
    assert ratio["Geometry"] == pytest.approx(m2 / (m2 + w2))
    assert ratio["All"] == pytest.approx((m1 + m2) / (m1 + m2 + w1 + w2))


def test_llm_normalize_accepts_faithful_rewrites_only():
    from saber_lib.llm.testing import ScriptedBackend

    answers = {"radius r is 5": "<formatted>radius $r$ is $5$</formatted>",
               r"area \(A\)": "no tags at all",
               "find x": "<formatted>compute $y$ instead</formatted>"}

    def respond(req):  # the prompt (saber_lib.prompts "latex_format") holds the text between <text> tags
        content = req.messages[1]["content"]
        return next(ans for text, ans in answers.items() if f"<text>\n{text}\n</text>" in content)

    backend = ScriptedBackend(respond)
    out, fails = mw.llm_normalize(list(answers), backend, retries=1)
    assert out == ["radius $r$ is $5$", "area $A$", "find x"]
    assert fails[0] is None
    assert "formatted" in fails[1]            # unparseable after the retry: deterministic fallback
    assert "changed the content" in fails[2]  # a rewrite that edits the words is rejected
    assert len(backend.seen) == 3 + 1         # one retry, for the unparseable answer only


@pytest.mark.parametrize("text, masked, n_inner", [
    ("[asy]a[/asy] x [asy]b[/asy] y [ASY]c[/ASY]", "x [figure 1] y", 1),   # ends set aside, the inner one marked
    ("no figure at all", "no figure at all", 0),
    ("[asy]only[/asy]", "", 0),
    (" [asy]a[/asy]\n\n text \n", "text \n", 0),
])
def test_mask_figures_round_trip(text, masked, n_inner):
    parts = mask_figures(text)
    assert parts[0] == masked and len(parts[1]) == n_inner
    assert unmask_figures(*parts) == text


def test_llm_normalize_sends_figures_as_placeholders_and_puts_them_back():
    from saber_lib.llm.testing import ScriptedBackend

    fig1 = '[asy] draw((0,0)--(1,1)); label("$A$",(0,0)); [/asy]'
    fig2 = "[ASY]dot((2,2));[/ASY]"
    prose = ("The circle through the three marked points is drawn in the plane. " * 8).strip()  # words dominate
    texts = [f"{fig1} Find x if x > 2. {fig2} Then y = x.\n{fig1}", f"Let r = 5. {fig2} {prose}"]
    answers = {  # what the model sees (figures at either end set aside, inner ones marked) -> its answer
        "Find x if x > 2. [figure 1] Then y = x.": "<formatted>Find $x$ if $x > 2$. [figure 1] Then $y = x$.</formatted>",
        f"Let r = 5. [figure 1] {prose}": f"<formatted>Let $r = 5$. {prose}</formatted>",  # the mark is lost
    }

    def respond(req):
        content = req.messages[1]["content"]
        assert "draw(" not in content and "dot(" not in content  # no figure code reaches the model
        return next(a for t, a in answers.items() if f"<text>\n{t}\n</text>" in content)

    out, fails = mw.llm_normalize(texts, ScriptedBackend(respond), retries=0)
    assert out[0] == f"{fig1} Find $x$ if $x > 2$. {fig2} Then $y = x$.\n{fig1}" and fails[0] is None
    assert out[1] == normalize_delimiters(texts[1])               # deterministic fallback
    assert "[figure 1] appears 0 times" in fails[1]


@pytest.mark.parametrize("text, opening", [
    ("A gardener plants 3 apple trees", "A gardener plants"),        # stops at the first number
    ("On a chess board, two rooks are placed", "On a chess board, two rooks are placed"),
    ("Let $Y$ be an ordered set", "Let"),                            # stops at math
    ("Let A be a point", "Let"),                                     # a capital letter is a point, not "A ..."
    ("Prove that AB is longer", "Prove that"),
    ("[figure 1] * (a) Suppose", "[figure 1]"),
    ("x is 2", ""),
    ("  leading space", ""),
    ("one two three four five six seven eight nine ten eleven twelve thirteen",
     "one two three four five six seven eight nine ten eleven twelve"),   # at most 12 words
])
def test_plain_opening_stops_before_anything_mathematical(text, opening):
    assert plain_opening(text) == opening


def test_llm_normalize_prefills_the_opening_words():
    from saber_lib.llm.testing import ScriptedBackend

    backend = ScriptedBackend(lambda req: req.messages[-1]["content"] + " $3$ apple trees.</formatted>")
    out, fails = mw.llm_normalize(["A gardener plants 3 apple trees."], backend, retries=0)
    assert backend.seen[0].messages[-1] == {"role": "assistant", "content": "<formatted>A gardener plants"}
    assert out == ["A gardener plants $3$ apple trees."] and fails == [None]


def test_a_failed_math_lexer_is_recorded_or_refused(monkeypatch):
    import pya0

    real = pya0.tokenize
    bad = r"\frac{a}{b} + x_{planted fault}"          # an expression seen by no other test (lru cache)

    def lexer(latex):
        if latex == bad:
            raise RuntimeError("lexer stuck")
        return real(latex)

    monkeypatch.setattr(pya0, "tokenize", lexer)
    text = f"Show ${bad}$ and $y$ hold"
    with pytest.raises(ValueError, match="Approach Zero's lexer failed on the math .*lexer stuck"):
        mw.math_aware_tokens(text)                      # no place to record it: no silent switch
    fallbacks = {}
    toks = mw.math_aware_tokens(text, stop_words=False, fallbacks=fallbacks)
    # the failed segment as alphanumeric runs; the good one still through Approach Zero
    assert toks == ["show", "$frac", "$a", "$b", "$x", "$planted", "$fault", "and", "$VAR:normal`y'", "hold"]
    assert fallbacks == {bad: "RuntimeError: lexer stuck"}
    assert mw.token_counts(text, fallbacks) == (7, 3)
    assert mw.fallback_table(fallbacks).rows() == [(bad, "RuntimeError: lexer stuck")]
    assert "failed on 1 math segment" in mw.fallback_note(fallbacks) and mw.fallback_note({}) == ""
    # the scorers of the study record into the same dict
    rec = {}
    sc = mw.make_scorers(["bm25"], k1=1.5, b=0.75, fallbacks=rec)
    sc["bm25"].score("count $y$", [f"Problem: {text}", "Problem: nothing"])
    assert rec == {bad: "RuntimeError: lexer stuck"}
    assert mw.fallback_table({}).height == 0


def test_normalize_step_without_and_with_an_llm():
    from saber_lib.llm.testing import ScriptedBackend

    plain = mw.normalize_step(["area \\(A\\)"], None, retries=1, model="m")
    assert plain["normalized"] is None and plain["record"] == {} and plain["note"] == ""
    assert "no LLM" in plain["normalizer"]
    answers = {"x is 1": "<formatted>$x$ is $1$</formatted>", "find y": "no tags"}

    def respond(req):  # the prompt holds the text between <text> tags
        return next(a for t, a in answers.items() if f"<text>\n{t}\n</text>" in req.messages[1]["content"])

    backend = ScriptedBackend(respond)
    out = mw.normalize_step(list(answers), backend, retries=0, model="m")
    assert out["normalized"] == ["$x$ is $1$", "find y"]
    assert out["record"]["format_failures"] == 1
    assert out["note"] == "LLM formatting: 1 of 2 answers rejected -> deterministic fallback"


def _split(ids, dropped_reasons=()):
    kept = pl.DataFrame({"query_id": ids, "query_domains": [["Algebra"]] * len(ids)})
    dropped = pl.DataFrame({"query_id": [f"d{i}" for i in range(len(dropped_reasons))], "reason": list(dropped_reasons)},
                           schema={"query_id": pl.String, "reason": pl.String})
    return mw.SplitQueries(kept, dropped, len(ids) + len(dropped_reasons))


def test_keep_rated_and_stage_record_count_the_rated_queries():
    split = _split(["q1", "q2", "q3"], ["no math", "no math", "no words"])
    bench = pl.DataFrame({"query_id": ["q1", "q1", "q2", "q3"], "cand_id": ["a", "b", "c", "d"]})
    ratings = pl.DataFrame({"query_id": ["q1", "q3", "q3"], "cand_id": ["a", "d", "e"]})
    rated = mw.keep_rated(split, bench, ratings)
    assert rated["cand_id"].to_list() == ["a", "b", "d"]
    assert split.kept["query_id"].to_list() == ["q1", "q3"]
    rec = mw.stage_record(split, "lexer", {"bm25": "rank_bm25"}, {"$x$": "bad"}, "judge: sim")
    assert rec["n_queries"] == 6 and rec["n_kept"] == 2 and rec["n_dropped"] == 3
    assert rec["dropped_reasons"] == {"no math": 2, "no words": 1}
    assert rec["tokenizer_fallbacks"] == 1 and rec["backend"] == rec["backends"] == "judge: sim"


def test_wide_table_orders_domains_and_leaves_empty_ones_null():
    from saber_lib.report import plots

    pref = pl.DataFrame({"retriever": ["bm25", "bm25", "tfidf", "tfidf"], "domain": ["All", "Algebra", "All", "Algebra"],
                         "math_wins_pct": [50.0, 25.0, 75.0, 100.0], "n_queries": [4, 4, 4, 4]})
    wide = mw.wide_table(pref)
    assert wide.columns[:2] == ["retriever", "All (n=4)"]
    assert len(wide.columns) == 2 + len(plots.DOMAIN_ORDER)
    row = dict(zip(wide.columns, wide.filter(pl.col("retriever") == "tfidf").row(0)))
    assert row["All (n=4)"] == 75.0 and row["Algebra (n=4)"] == 100.0
    others = [c for c in wide.columns[2:] if not c.startswith("Algebra")]
    assert others and all(c.endswith("(n=0)") and row[c] is None for c in others)


def test_captions_name_top_n_kept_queries_and_backends():
    cap = mw.captions(5, 12, {}, "judge: sim")
    assert "top-5" in cap["selected"] and "(12 queries)" in cap["selected"] and "(12 queries)" in cap["all"]
    assert cap["table"].endswith("none); judge: sim")
