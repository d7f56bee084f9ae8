"""The strict parsers on a corpus of ugly model outputs (tests/fixtures/llm/messy_outputs.yaml)."""
from pathlib import Path

import pytest
import yaml

from saber_lib.llm import parsers as P
from saber_lib.llm.types import ParseError

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
