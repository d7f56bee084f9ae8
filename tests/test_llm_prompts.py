"""Prompt templates: rendering, field checks, schemas, parsers, and that the text is our own."""
import json
import re
from pathlib import Path

import jsonschema
import pytest

from saber_lib import prompts
from saber_lib.llm import ChatRequest, ParseError

PAIR = dict(query_problem="QP", query_solution="QS", problem_1="P1", solution_1="S1",
            problem_2="P2", solution_2="S2")
EXAMPLES = {
    "topic_scoring": dict(problem="Find x.", solution="x = 2.", labels=["Algebra", "Linear Equations"]),
    "solution_summary": dict(problem="Show n(n+1) is even.", solution="Consecutive integers.", max_words=30),
    "pairwise_judge": PAIR,
    "pairwise_judge_logprob": PAIR,
    "ordinal_judge": dict(query_problem="QP", query_solution="QS", problem="P", solution="S"),
    "ordinal_judge_score": dict(query_problem="QP", query_solution="QS", problem="P", solution="S"),
    "latex_format": dict(text="If r is 5, find \\(\\pi r^2\\)."),
}


def test_every_template_renders_with_all_fields_filled():
    assert set(prompts.names()) == set(EXAMPLES)
    for name, fields in EXAMPLES.items():
        msgs = prompts.render(name, **fields)
        assert [m["role"] for m in msgs][:2] == ["system", "user"]
        text = "\n".join(m["content"] for m in msgs)
        assert "{{" not in text and "}}" not in text
        for v in fields.values():
            for piece in (v if isinstance(v, list) else [str(v)]):
                assert piece in text


def test_logprob_prompt_ends_with_the_boxed_prefill():
    msgs = prompts.render("pairwise_judge_logprob", **PAIR)
    assert msgs[-1] == {"role": "assistant", "content": "\\boxed{"}
    assert ChatRequest(messages=msgs).prefill == "\\boxed{"


def test_short_answer_prompts_end_with_their_prefill():
    """The score-only ordinal prompt continues after ``\\boxed{`` and the LaTeX rewrite after
    ``<formatted>``; the backend returns the prefill with the answer, which the parsers read whole."""
    msgs = prompts.render("ordinal_judge_score", **EXAMPLES["ordinal_judge_score"])
    assert ChatRequest(messages=msgs).prefill == "\\boxed{"
    assert "0-10" in msgs[1]["content"] and "96-100" in msgs[1]["content"]  # the same bands as ordinal_judge
    assert prompts.parser("ordinal_judge_score")("\\boxed{" + "73}") == 73
    with pytest.raises(ParseError):
        prompts.parser("ordinal_judge_score")("\\boxed{" + "73")  # cut before the closing brace
    msgs = prompts.render("latex_format", **EXAMPLES["latex_format"])
    assert ChatRequest(messages=msgs).prefill == "<formatted>"
    orig = EXAMPLES["latex_format"]["text"]
    assert prompts.parser("latex_format", text=orig)("<formatted>" + "If $r$ is $5$, find $\\pi r^2$.</formatted>") \
        == "If $r$ is $5$, find $\\pi r^2$."


def test_candidates_appear_in_the_order_given():
    text = prompts.render("pairwise_judge", **PAIR)[1]["content"]
    assert text.index("QP") < text.index("P1") < text.index("P2")


def test_field_values_are_inserted_verbatim_once():
    msgs = prompts.render("latex_format", text="keep {{text}} and $x$ and \\boxed{1}")
    assert "keep {{text}} and $x$ and \\boxed{1}" in msgs[1]["content"]


def test_missing_or_unknown_fields_are_errors():
    with pytest.raises(TypeError, match="missing fields \\['solution_2'\\]"):
        prompts.render("pairwise_judge", **{k: v for k, v in PAIR.items() if k != "solution_2"})
    with pytest.raises(TypeError, match="unknown fields \\['oops'\\]"):
        prompts.render("latex_format", text="x", oops=1)
    with pytest.raises(TypeError):
        prompts.render("latex_format", text=None)
    with pytest.raises(KeyError, match="unknown prompt"):
        prompts.render("nope")


def test_schemas_accept_what_the_parsers_accept():
    labels = ["Algebra", "Linear Equations"]
    scores = {"Algebra": 1.0, "Linear Equations": 0.4}
    ans = {"best_label": "Algebra", "scores": scores}
    schema = prompts.json_schema("topic_scoring", labels=labels)
    jsonschema.validate(ans, schema)
    for bad in ({"best_label": "Algebra", "scores": {"Algebra": 1.0}},        # a label unscored
                {"best_label": "Geometry", "scores": scores},                  # best is not a candidate
                {"scores": scores, "best_label": "Algebra", "note": "x"},      # an extra member
                scores):                                                       # the best label not named
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)
    assert list(schema["properties"]) == ["best_label", "scores"]   # named before the scores are written
    assert list(schema["properties"]["scores"]["properties"]) == labels
    parse = prompts.parser("topic_scoring", labels=labels)
    assert parse(json.dumps(ans)) == scores == parse(json.dumps(scores))   # the scores alone parse too
    # what the schema lets through but the prompt's contract forbids: no label at 1.0
    zeros = {"best_label": "Algebra", "scores": {"Algebra": 0.0, "Linear Equations": 0.0}}
    jsonschema.validate(zeros, schema)
    with pytest.raises(ParseError, match="every one of the 2 labels scored 0.0"):
        parse(json.dumps(zeros))

    summ = {"noCoreIdea": False, "coreIdea": "Pair consecutive integers.", "supportingIdeas": ["parity"],
            "keywords": ["parity"], "confidence": 0.9}
    jsonschema.validate(summ, prompts.json_schema("solution_summary"))
    assert prompts.parser("solution_summary", max_words=30)(json.dumps(summ))["core_idea"] == summ["coreIdea"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**summ, "supportingIdeas": ["a", "b", "c", "d"]}, prompts.json_schema("solution_summary"))
    # guided decoding keeps the core idea to plain words: what the no-equation rule rejects, the schema
    # cannot produce
    for bad in ("Show that $f$ is linear.", "Use x = y to simplify.", "Bound a^2 by the sum.", "Use \\sqrt{2}."):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**summ, "coreIdea": bad}, prompts.json_schema("solution_summary"))
    for ok in ("Apply AM-GM to the four squares.", None):
        jsonschema.validate({**summ, "coreIdea": ok}, prompts.json_schema("solution_summary"))

    req = prompts.request("topic_scoring", guided=True, **EXAMPLES["topic_scoring"])
    assert req.json_schema == schema
    assert prompts.request("topic_scoring", **EXAMPLES["topic_scoring"]).json_schema is None


def test_parsers_match_the_answer_formats():
    assert prompts.parser("pairwise_judge")("notes...\n\\boxed{1}") == "1"
    assert prompts.parser("ordinal_judge")("notes\n\\boxed{64}") == 64
    with pytest.raises(ParseError):
        prompts.parser("ordinal_judge")("\\boxed{101}")
    orig = EXAMPLES["latex_format"]["text"]
    assert prompts.parser("latex_format", text=orig)(
        "<formatted>If $r$ is $5$, find $\\pi r^2$.</formatted>") == "If $r$ is $5$, find $\\pi r^2$."


def test_summary_prompt_states_the_word_limit():
    assert "at most 17 words" in prompts.render("solution_summary", problem="p", solution="s", max_words=17)[0]["content"]


PAPER = Path(__file__).resolve().parents[2] / "shared" / "paper" / "sabermath-paper.tex"


@pytest.mark.skipif(not PAPER.exists(), reason="paper source not beside the project")
def test_prompts_are_written_in_our_own_words():
    """No run of 6 words of any template occurs in the paper (its prompts included)."""
    def words(t):
        return re.findall(r"[a-z0-9]+", t.lower())

    pw = words(PAPER.read_text())
    grams = {tuple(pw[i:i + 6]) for i in range(len(pw) - 5)}
    for f in sorted(prompts.HERE.glob("*.txt")):
        w = words(f.read_text())
        shared = [" ".join(w[i:i + 6]) for i in range(len(w) - 5) if tuple(w[i:i + 6]) in grams]
        assert not shared, (f.name, shared[:5])
