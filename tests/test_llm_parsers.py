"""The strict parsers on a corpus of ugly model outputs (tests/fixtures/llm/messy_outputs.yaml)."""
import json
from pathlib import Path

import pytest
import yaml

from saber_lib.llm import parsers as P
from saber_lib.llm.types import ParseError
from saber_lib.topics.scorers import scores_from_json

CASES = yaml.safe_load((Path(__file__).parent / "fixtures" / "llm" / "messy_outputs.yaml").read_text())

PARSERS = {
    "json": P.parse_json_object,
    "choice": P.parse_boxed_choice,
    "int": P.parse_boxed_int,
    "topics": P.parse_topic_scores,
    "summary": P.parse_summary,
    "latex": P.parse_latex_rewrite,
}


def test_fixture_corpus_is_varied():
    kinds = {c["parser"] for c in CASES}
    assert kinds == set(PARSERS)
    assert sum("error" in c for c in CASES) >= 20 and sum("expect" in c for c in CASES) >= 20


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_messy_output(case):
    fn = PARSERS[case["parser"]]
    args = case.get("args", {})
    if "error" in case:
        with pytest.raises(ParseError) as e:
            fn(case["text"], **args)
        assert case["error"] in str(e.value)
    else:
        assert fn(case["text"], **args) == case["expect"]


def test_choice_options_are_configurable():
    assert P.parse_boxed_choice(r"\boxed{B}", options=("A", "B")) == "B"
    with pytest.raises(ParseError):
        P.parse_boxed_choice(r"\boxed{2}", options=("A", "B"))


def test_strip_thinking_keeps_plain_answers():
    assert P.strip_thinking("  just the answer \n") == "just the answer"
    assert P.strip_thinking("<thinking>x</thinking>y") == "y"


def test_nested_boxes_belong_to_their_parent():
    # the outer box is the last top-level one; its content keeps the inner box
    assert P.last_boxed(r"\boxed{a \boxed{b} c}") == r"a \boxed{b} c"


def test_json_object_roundtrip_of_random_dicts():
    # invariant: any dict dumped by json (with a reasoning prefix and a fence) parses back equal
    import json
    import random

    rng = random.Random(0)
    for _ in range(50):
        d = {f"k{i}": rng.choice([rng.random(), rng.randint(-5, 5), "s{}", [1, "x,"], None, True])
             for i in range(rng.randint(1, 6))}
        text = "<think>{\"decoy\": 1}</think>Answer:\n```json\n" + json.dumps(d, indent=rng.choice([None, 2])) + "\n```"
        assert P.parse_json_object(text) == d


def test_one_reading_of_a_topic_answer_for_the_report_and_the_scorer():
    labels = ["Number Theory", "Geometry", "Calculus and Analysis"]
    answer = {"best_label": "Geometry", "scores": {"number-theory": 0.25, "GEOMETRY": 1, "Calculus  and analysis": 0.5,
                                                    "Topology": 0.9}}
    # loose keys match their label; a key that is no label is ignored
    assert P.label_scores(answer, labels) == {"Number Theory": 0.25, "Geometry": 1.0, "Calculus and Analysis": 0.5}
    assert scores_from_json(answer, labels).tolist() == [0.25, 1.0, 0.5]
    assert P.parse_topic_scores(json.dumps(answer), labels) == {"Number Theory": 0.25, "Geometry": 1.0,
                                                                  "Calculus and Analysis": 0.5}
    partial = {"Geometry": 1.0}
    with pytest.raises(ParseError, match="no score for 2 label"):
        P.label_scores(partial, labels)                      # the report: every label must be scored
    assert scores_from_json(partial, labels).tolist() == [0.0, 1.0, 0.0]   # the scorer: a missing label is 0
    for bad in ({"Geometry": 1.5}, {"Geometry": "high"}, {"Geometry": True}):
        with pytest.raises(ParseError, match="Geometry"):
            scores_from_json(bad, labels)
