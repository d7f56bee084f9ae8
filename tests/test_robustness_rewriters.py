import re
from dataclasses import dataclass
from fractions import Fraction

import polars as pl
import pytest
import sympy

from saber_lib.llm.cache import ResponseCache
from saber_lib.llm.testing import ScriptedBackend
from saber_lib.llm.types import ChatRequest
from saber_lib.robustness.invariance import LLMRewriter, flip_rates, rewrite_triple
from saber_lib.robustness.rewriters import (LatexToWords, NumberFormat, RenameVariables, SentenceOrder, WordsToLatex,
                                            default_rewriters, map_math, math_spans, split_sentences)

NO_FEATURES = [
    "",
    "Plain words without any mathematics at all.",
    "A number 12 and another 7, nothing else; x is a letter in prose.",
]


def _math_nospace(t):
    """The text with whitespace removed inside math spans (insignificant there)."""
    return map_math(t, lambda s: re.sub(r"\s+", "", s))


# ---------------------------------------------------------------- identity on texts without the feature
@pytest.mark.parametrize("rw", list(default_rewriters().values()), ids=lambda r: r.name)
@pytest.mark.parametrize("text", NO_FEATURES)
def test_identity_without_the_feature(rw, text):
    assert rw.rewrite(text) == text


def test_identity_on_math_without_the_rewritten_feature():
    assert RenameVariables().rewrite("$2 + 3 = 5$ and $\\pi e^{i} > 1$.") == "$2 + 3 = 5$ and $\\pi e^{i} > 1$."
    assert LatexToWords().rewrite("$x + y = z$") == "$x + y = z$"
    assert WordsToLatex().rewrite("$x + y = z$, and x squared in prose stays.") == \
        "$x + y = z$, and x squared in prose stays."
    for style in ("decimal", "fraction", "slash"):
        assert NumberFormat(style).rewrite("$x + 12 = 3y$ on 1/2/2020.") == "$x + 12 = 3y$ on 1/2/2020."
    two = "Let $x = 2$. Find $x + 1$."
    assert SentenceOrder().rewrite(two) == two


# ---------------------------------------------------------------- variable renaming
def test_renaming_is_consistent_across_the_group():
    q = "Find all real $x$ such that $x^2 - 5x + 6 = 0$."
    a = "Solve $x^2 = 4$ for $x$, then compute $\\sqrt{x}$."
    b = "If $y = 2x$, find $y$."
    rw = RenameVariables()
    assert rw.plan([q, a, b]) == {"x": "u", "y": "v"}
    assert rw.rewrite_group([q, a, b]) == [
        "Find all real $u$ such that $u^2 - 5u + 6 = 0$.",
        "Solve $u^2 = 4$ for $u$, then compute $\\sqrt{u}$.",
        "If $v = 2u$, find $v$.",
    ]


def test_renaming_keeps_commands_constants_functions_and_differentials():
    t = ("$\\int_0^1 x\\, dx = \\frac{1}{2}$, $e^{i t} = \\cos t + i \\sin t$, "
         "$f \\colon \\mathbb{R} \\to \\mathbb{R}$, $\\max(a, b) \\ge \\text{for all } a$ and \\(ab + c\\).")
    rw = RenameVariables()
    plan = rw.plan([t])
    assert set(plan) == {"a", "b", "c", "f", "t", "x"} and "e" not in plan and "i" not in plan
    out = rw.rewrite(t)
    x, tt, f, a, b, c = (plan[v] for v in "xtfabc")
    assert out == (f"$\\int_0^1 {x}\\, d{x} = \\frac{{1}}{{2}}$, $e^{{i {tt}}} = \\cos {tt} + i \\sin {tt}$, "
                   f"${f} \\colon \\mathbb{{R}} \\to \\mathbb{{R}}$, $\\max({a}, {b}) \\ge \\text{{for all }} {a}$ "
                   f"and \\({a}{b} + {c}\\).")
    # the new letters are fresh: renaming back restores the text exactly
    back = RenameVariables(mapping={v: k for k, v in plan.items()}).rewrite(out)
    assert back == t


def test_renaming_keeps_the_mathematics_of_an_equation():
    t = "$x^2 + 2xy + y^2 = (x + y)^2$"
    out = RenameVariables().rewrite(t)
    plan = RenameVariables().plan([t])
    lhs, rhs = out.strip("$").split("=")
    X, Y = sympy.symbols(f"{plan['x']} {plan['y']}")
    expr = lambda s: sympy.sympify(s.replace("^", "**").replace(f"2{plan['x']}{plan['y']}",
                                                                  f"2*{plan['x']}*{plan['y']}"))
    assert sympy.simplify(expr(lhs) - expr(rhs)) == 0
    assert {str(s) for s in expr(lhs).free_symbols} == {plan["x"], plan["y"]}


# ---------------------------------------------------------------- LaTeX as words and back
def test_latex_to_words_and_back():
    t = "Show that $\\frac{1}{2} + x^2 \\le 3 \\cdot y$ and $\\sqrt{n} \\ne \\pi$ for $x^3 \\geq \\frac12$."
    words = LatexToWords().rewrite(t)
    assert words == ("Show that $(1 over 2) + x squared is at most 3 times y$ and "
                     "$(square root of n) is not equal to pi$ for $x cubed is at least (1 over 2)$.")
    back = WordsToLatex().rewrite(words)
    canonical = "Show that $\\frac{1}{2} + x^2 \\le 3 \\cdot y$ and $\\sqrt{n} \\ne \\pi$ for $x^3 \\ge \\frac{1}{2}$."
    assert _math_nospace(back) == _math_nospace(canonical)


def test_latex_to_words_leaves_compound_arguments_and_other_exponents():
    t = "$\\frac{x+1}{2} + x^{10} + 2^{n}$"
    assert LatexToWords().rewrite(t) == t
    assert LatexToWords().rewrite("$\\left(x\\right)^2$") == "$\\left(x\\right) squared$"


# ---------------------------------------------------------------- number format
def test_number_format_decimal():
    t = "Half is $\\frac{1}{2}$, also $\\frac12$ and 1/2 of 3/8; a third $\\frac{1}{3}$ stays, so does $2\\frac{1}{2}$."
    assert NumberFormat("decimal").rewrite(t) == \
        "Half is $0.5$, also $0.5$ and 0.5 of 0.375; a third $\\frac{1}{3}$ stays, so does $2\\frac{1}{2}$."
    assert NumberFormat("decimal").rewrite("$x - 1/4 = \\frac{-3}{8}$") == "$x - 0.25 = -0.375$"


def test_number_format_fraction_and_slash():
    assert NumberFormat("fraction").rewrite("$0.5 + 0.25 = 1/2 + \\frac14$, it costs 2.5 dollars.") == \
        "$\\frac{1}{2} + \\frac{1}{4} = \\frac{1}{2} + \\frac{1}{4}$, it costs $\\frac{5}{2}$ dollars."
    assert NumberFormat("slash").rewrite("$\\frac{3}{4}x + 0.2$ and 0.75 in prose") == "$(3/4)x + (1/5)$ and 3/4 in prose"


@pytest.mark.parametrize("style", ["decimal", "fraction", "slash"])
def test_number_format_keeps_values(style):
    t = "$\\frac{3}{8} + 0.125 - 1/4 + \\frac{7}{5}$"
    out = NumberFormat(style).rewrite(t).strip("$")

    def value(s):
        s = re.sub(r"\\frac\{(-?\d+)\}\{(\d+)\}", r"Fraction(\1, \2)", s)
        s = re.sub(r"(\d+)/(\d+)", r"Fraction(\1, \2)", s)
        s = re.sub(r"(\d+\.\d+)", r"Fraction('\1')", s)
        return eval(s, {"Fraction": Fraction})

    assert value(out) == Fraction(3, 8) + Fraction(1, 8) - Fraction(1, 4) + Fraction(7, 5)


# ---------------------------------------------------------------- sentence order
def test_sentence_order_swaps_independent_sentences_only():
    t = "Alice has 3 apples. Bob has 5 pears. How many fruits are there?"
    assert SentenceOrder().rewrite(t) == "Bob has 5 pears. Alice has 3 apples. How many fruits are there?"
    # a reference word, a shared variable, or a colon blocks the swap
    for t in ["Let $x = 2$. Then $y = x + 1$. Find $y$.",
              "Let $x = 2$. Let $y = x + 1$. Find $y$.",
              "Problem: Alice has 3 apples. Bob has 5 pears. Count them."]:
        assert SentenceOrder().rewrite(t) == t
    t = "Let $a = 2$. Let $b = 3$. Compute $a + b$.\n\nA box holds 4 balls. A bag holds 6 coins. Count all."
    assert SentenceOrder().rewrite(t) == ("Let $b = 3$. Let $a = 2$. Compute $a + b$.\n\n"
                                          "A bag holds 6 coins. A box holds 4 balls. Count all.")


def test_sentence_split_respects_math_and_abbreviations():
    t = "We have $x = 1. Y$ here, e.g. This one. Next sentence."
    assert split_sentences(t) == ["We have $x = 1. Y$ here, e.g. This one. ", "Next sentence."]


# ---------------------------------------------------------------- LLM rewriter
def test_llm_rewriter_builds_chat_requests_and_keeps_text_on_failure():
    be = ScriptedBackend(lambda r: "" if "fail" in r.messages[-1]["content"] else r.messages[-1]["content"].upper())
    rw = LLMRewriter(be, retries=1)
    assert rw.rewrite_group(["find x", "", "fail here"]) == ["FIND X", "", "fail here"]
    # the empty text is not sent; the empty answer is asked once more (attempt 1), then kept as a failure
    assert rw.failures == 1 and "empty paraphrase" in rw.failure_reasons[0]
    assert [(r.messages[-1]["content"], r.attempt) for r in be.seen] == [("find x", 0), ("fail here", 0),
                                                                         ("fail here", 1)]
    assert all(isinstance(r, ChatRequest) and r.messages[0]["role"] == "system" for r in be.seen)


def test_an_empty_paraphrase_is_not_cached_and_a_rerun_asks_again(tmp_path):
    asked: dict[str, int] = {}

    def first_garbage(r):          # the first answer to a text is empty, later ones are good
        t = r.messages[-1]["content"]
        asked[t] = asked.get(t, 0) + 1
        return "" if asked[t] == 1 and t == "two" else t.upper()

    db = tmp_path / "llm.sqlite"
    be1 = ScriptedBackend(first_garbage, cache=ResponseCache(db))
    rw1 = LLMRewriter(be1, retries=0)
    assert rw1.rewrite_group(["one", "two"]) == ["ONE", "two"]
    assert rw1.failures == 1 and be1.usage()["calls"] == 2
    # the rerun (same cache) serves "one" from the cache and asks the model again for "two"
    be2 = ScriptedBackend(first_garbage, cache=ResponseCache(db))
    rw2 = LLMRewriter(be2, retries=0)
    assert rw2.rewrite_group(["one", "two"]) == ["ONE", "TWO"]
    assert rw2.failures == 0 and (be2.usage()["calls"], be2.usage()["cached"]) == (1, 1)
    assert [r.messages[-1]["content"] for r in be2.seen] == ["two"]
    # 3 model calls in all for 2 texts: 1 failure + 2 answers; a third run calls nothing
    assert asked == {"one": 1, "two": 2}
    be3 = ScriptedBackend(first_garbage, cache=ResponseCache(db))
    assert LLMRewriter(be3, retries=0).rewrite_group(["one", "two"]) == ["ONE", "TWO"] and not be3.seen


# ---------------------------------------------------------------- flip rates
@dataclass(frozen=True)
class Doc:
    id: str
    problem: str
    solution: str = ""


def test_rewrite_triple_keeps_ids_and_renames_across_documents():
    q, a, b = Doc("q", "Find $x$.", "$x = 1$"), Doc("a", "Solve $x + 1 = 2$."), Doc("b", "Let $y = x$.")
    q2, a2, b2 = rewrite_triple(RenameVariables(), q, a, b)
    assert (q2.id, a2.id, b2.id) == ("q", "a", "b")
    assert (q2.problem, q2.solution, a2.problem, b2.problem) == ("Find $u$.", "$u = 1$", "Solve $u + 1 = 2$.",
                                                                  "Let $v = u$.")


def test_flip_rates_of_a_position_biased_and_a_length_judge():
    triples = [("Find $x$ with $x^2 = 4$.", "Solve $x^2 = 9$.", "Alice has $\\frac{1}{2}$ of 3 apples. Bob has 2. Sum?"),
               ("Compute $1/2 + y$.", "Let $y = 0.5$. Bob is here. Count.", "Plain text only.")]
    always_first = lambda q, a, b: "a"
    t = flip_rates(always_first, triples, {"rename_variables": RenameVariables()})
    row = dict(zip(t["transformation"], t["flip_rate"]))
    assert row["order_swap"] == 1.0 and row["rename_variables"] == 0.0

    def shorter(q, a, b):  # position-blind; prefers the shorter candidate
        return "a" if len(a) < len(b) else "b" if len(b) < len(a) else "tie"

    t = flip_rates(shorter, triples)
    rates = dict(zip(t["transformation"], t["flip_rate"]))
    changed = dict(zip(t["transformation"], t["changed"]))
    assert rates["order_swap"] == 0.0 and rates["rename_variables"] == 0.0
    # the second triple's "Bob is here." refers back ("here"): only the first triple is reordered
    assert changed["rename_variables"] == 2 and changed["sentence_order"] == 1
    assert t["failures"].sum() == 0 and t.height == 1 + len(default_rewriters())


def test_flip_rates_accept_judge_objects_with_judge_pairs():
    class J:
        def judge_pairs(self, items):
            return [1 if "$" in a else 2 for _, a, _b in items]

    # position-blind (it prefers the candidate with math): the swap flips nothing; writing the math
    # of "$x^2$" as words keeps the dollar signs, so no flip either
    t = flip_rates(J(), [("q", "$x^2$", "y"), ("q", "x", "$y$")], {"latex_to_words": LatexToWords()})
    got = {r["transformation"]: r for r in t.iter_rows(named=True)}
    assert got["order_swap"]["flips"] == 0 and got["order_swap"]["compared"] == 2
    assert got["latex_to_words"]["changed"] == 1 and got["latex_to_words"]["flips"] == 0

    class Picky:  # prefers a candidate written with LaTeX commands or exponents
        def judge_pairs(self, items):
            return [1 if re.search(r"[\\^]", a) else 2 for _, a, _b in items]

    t = flip_rates(Picky(), [("q", "$x^2$", "y"), ("q", "x", "$y$")], {"latex_to_words": LatexToWords()})
    got = {r["transformation"]: r for r in t.iter_rows(named=True)}
    assert got["latex_to_words"]["flips"] == 1 and got["latex_to_words"]["flip_rate_changed"] == 1.0
    assert got["order_swap"]["flips"] == 1
