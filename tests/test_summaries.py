"""Solution summaries: LLM path with validation and retry (fake backend), extractive path."""
import json

import pytest

from saber_lib.summaries import summarize as summaries
from saber_lib.signals import summary_tokens


def answer(core, no_core=False):
    return json.dumps({"noCoreIdea": no_core, "coreIdea": core, "supportingIdeas": ["parity"],
                       "keywords": ["invariant"], "confidence": 0.9})


@pytest.mark.parametrize("text,kinds", [
    ("Pair each term with its mirror image and count the pairs.", []),
    ("Use the identity $a^2-b^2$ to factor.", ["latex", "arithmetic", "algebra"]),
    ("Show that x = 3 works.", ["relation"]),
    ("Note that 2 + 3 is prime.", ["arithmetic"]),
    ("Apply \\frac thinking", ["latex"]),
    ("Bound x^2 by the AM-GM inequality.", ["arithmetic", "algebra"]),
    ("Use Vieta's formulas on the quadratic with 2 roots.", []),
])
def test_equation_violations(text, kinds):
    assert summaries.equation_violations(text) == kinds


def fake_backend(answers_by_attempt):
    from saber_lib.llm.testing import ScriptedBackend

    def respond(req):
        prob = req.messages[-1]["content"]
        key = "P1" if "P1" in prob else "P2" if "P2" in prob else "P3"
        seq = answers_by_attempt[key]
        return seq[min(req.attempt, len(seq) - 1)]
    return ScriptedBackend(respond)


def test_llm_summaries_validate_retry_and_fail():
    be = fake_backend({
        "P1": [answer("Pair terms symmetrically and count pairs.")],                  # fine at once
        "P2": [answer("Write n = 2k and expand."), answer("Split by parity of n.")],  # retried once
        "P3": [answer("Compute 3 * 4 directly."), answer("Then set x = 1.")],        # fails twice
    })
    rows, counts = summaries.summarize_llm(be, ["a", "b", "c"], ["P1", "P2", "P3"], ["s1", "s2", "s3"],
                                           max_words=30, retries=1)
    assert [r["failed"] for r in rows] == [False, False, True]
    assert rows[1]["core_idea"] == "Split by parity of n."
    assert rows[1]["summary_text"] == "Split by parity of n."
    assert rows[2]["summary_text"] == "" and "relation" in rows[2]["failure_reason"]
    assert counts == {"relation": 2, "arithmetic": 1}
    assert all(r["summarizer"] == "llm:scripted" for r in rows)
    assert len(be.seen) == 5                      # 3 first attempts + 2 retries


def test_llm_summary_too_long_and_no_core_idea():
    long = " ".join(["word"] * 31)
    be = fake_backend({"P1": [answer(long)], "P2": [answer(None, no_core=True)], "P3": [answer("Use parity.")]})
    rows, counts = summaries.summarize_llm(be, ["a", "b", "c"], ["P1", "P2", "P3"], ["", "", ""],
                                           max_words=30, retries=0)
    assert rows[0]["failed"] and counts["too_long"] == 1
    assert rows[1]["no_core_idea"] and not rows[1]["failed"] and rows[1]["summary_text"] == ""
    df = summaries.summaries_frame(rows)
    assert df.columns[:8] == ["doc_id", "no_core_idea", "core_idea", "supporting_ideas", "keywords",
                              "confidence", "summary_text", "failed"]


def test_extractive_summaries():
    sols = [
        "We use the pigeonhole principle. Among any five integers two share a residue modulo four, "
        "by pigeonhole. Hence their difference is divisible by four.",
        "By the pigeonhole principle some box holds two balls. The residue classes act as boxes for "
        "the pigeonhole argument.",
        "Apply the triangle inequality to the side lengths. Then the perimeter bound follows from "
        "the triangle inequality applied twice. $a+b>c$.",
        "$$x^2=4$$",
    ]
    rows = summaries.summarize_extractive([f"d{i}" for i in range(4)], [""] * 4, sols, max_words=30)
    assert all(r["summarizer"] == "extractive:tfidf" for r in rows)
    assert rows[3]["no_core_idea"] and rows[3]["summary_text"] == ""
    for r in rows[:3]:
        assert not r["no_core_idea"] and len(r["core_idea"].split()) <= 30
        assert summaries.equation_violations(r["core_idea"]) == []
        assert summary_tokens(r["core_idea"]) <= summary_tokens(r["summary_text"])
    assert "triangle" in rows[2]["core_idea"].lower()
    # a technique word repeated in two solutions ranks high in both (TF-IDF with sublinear tf);
    # the two pigeonhole solutions share more summary tokens than either does with the triangle one
    a, b, c = (summary_tokens(r["summary_text"]) for r in rows[:3])
    assert "pigeonhole" in a & b
    assert len(a & b) > len(a & c) and len(a & b) > len(b & c)
    again = summaries.summarize_extractive([f"d{i}" for i in range(4)], [""] * 4, sols, max_words=30)
    assert again == rows
