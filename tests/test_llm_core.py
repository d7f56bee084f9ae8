"""Cache, resume, retries, accounting and the log-probability verdict, on a scripted backend."""
import math
import sqlite3

import pytest

from saber_lib import llm as L
from saber_lib import prompts
from saber_lib.llm.testing import ScriptedBackend


def req(text, **kw):
    return L.ChatRequest(messages=[{"role": "user", "content": text}], **kw)


def echo(r):
    return "echo:" + r.messages[-1]["content"]


def test_cache_hit_skips_the_model(tmp_path):
    db = tmp_path / "c.sqlite"
    b1 = ScriptedBackend(echo, cache=L.ResponseCache(db))
    out1 = b1.chat_batch([req("a"), req("b")])
    assert [r.text for r in out1] == ["echo:a", "echo:b"] and not any(r.cached for r in out1)
    b2 = ScriptedBackend(lambda r: pytest.fail("model called despite cache"), cache=L.ResponseCache(db))
    out2 = b2.chat_batch([req("b"), req("a")])
    assert [r.text for r in out2] == ["echo:b", "echo:a"] and all(r.cached for r in out2)
    assert b2.usage()["cached"] == 2 and b2.usage()["calls"] == 0


def test_key_depends_on_model_sampling_and_attempt_not_backend(tmp_path):
    b = ScriptedBackend(echo, model_id="m1")
    base = b.cache_key(req("x"))
    assert b.cache_key(req("x", temperature=b.temperature, max_tokens=b.max_tokens)) == base
    for other in (req("y"), req("x", temperature=0.3), req("x", max_tokens=7), req("x", attempt=1),
                  req("x", seed=5), req("x", choices=("1", "2")), req("x", json_schema={"type": "object"}),
                  req("x", logprobs_for=("1", "2"))):
        assert b.cache_key(other) != base
    assert ScriptedBackend(echo, model_id="m2").cache_key(req("x")) != base

    class Other(ScriptedBackend):
        name = "other"

    assert Other(echo, model_id="m1").cache_key(req("x")) == base  # backend-independent


def test_derived_seed_is_reproducible_and_differs_between_attempts():
    b = ScriptedBackend(echo)
    k0, k1 = b.cache_key(req("x")), b.cache_key(req("x", attempt=1))
    assert b.seed_for(req("x"), k0) == b.seed_for(req("x"), k0)
    assert b.seed_for(req("x"), k0) != b.seed_for(req("x", attempt=1), k1)
    assert b.seed_for(req("x", seed=42), k0) == 42


def test_resume_after_kill_repeats_no_completed_call(tmp_path):
    db = tmp_path / "c.sqlite"
    reqs = [req(f"q{i}") for i in range(10)]
    killed = ScriptedBackend(echo, cache=L.ResponseCache(db), fail_after=4)
    with pytest.raises(KeyboardInterrupt):
        killed.chat_batch(reqs)
    assert len(killed.seen) == 4
    again = ScriptedBackend(echo, cache=L.ResponseCache(db))
    out = again.chat_batch(reqs)
    assert [r.messages[0]["content"] for r in again.seen] == [f"q{i}" for i in range(4, 10)]
    assert [r.text for r in out] == [f"echo:q{i}" for i in range(10)]
    assert again.usage()["cached"] == 4 and again.usage()["calls"] == 6


def test_corrupt_entry_is_detected_and_redone(tmp_path):
    db = tmp_path / "c.sqlite"
    ScriptedBackend(echo, cache=L.ResponseCache(db)).chat_batch([req("a"), req("b")])
    con = sqlite3.connect(db)
    con.execute("UPDATE responses SET payload = replace(payload, 'echo:a', 'echo:X')")
    con.execute("UPDATE responses SET payload = substr(payload, 1, 10) WHERE payload LIKE '%echo:b%'")
    con.commit()
    con.close()
    cache = L.ResponseCache(db)
    b = ScriptedBackend(echo, cache=cache)
    out = b.chat_batch([req("a"), req("b")])
    assert [r.text for r in out] == ["echo:a", "echo:b"] and len(b.seen) == 2 and cache.corrupt == 2
    assert all(r.cached for r in ScriptedBackend(echo, cache=L.ResponseCache(db)).chat_batch([req("a"), req("b")]))


def test_unreadable_cache_file_names_the_file(tmp_path):
    bad = tmp_path / "c.sqlite"
    bad.write_bytes(b"this is not a database" * 100)
    with pytest.raises(L.LLMError, match="c.sqlite"):
        L.ResponseCache(bad)


def test_cache_ties_a_model_id_to_one_weights_file(tmp_path):
    """The first file's hash is recorded per model id (and kept across openings); the same file
    again is fine, another file under the same id is one error naming both hashes and the keys."""
    from saber_lib.llm.cache import ResponseCache

    path = tmp_path / "c.sqlite"
    c = ResponseCache(path)
    c.bind_model_file("m", "a" * 64, "pkg:x (/x.gguf)")
    c.bind_model_file("m", "a" * 64, "pkg:x (/x.gguf)")
    c.bind_model_file("other", "b" * 64, "/o.gguf")          # another model id: its own file
    c.close()
    c = ResponseCache(path)
    with pytest.raises(L.LLMError) as e:
        c.bind_model_file("m", "b" * 64, "/y.gguf")
    msg = str(e.value)
    assert str(path) in msg and "a" * 16 in msg and "b" * 16 in msg and "llm.model_path /y.gguf" in msg
    assert "'m'" in msg and len(msg.splitlines()) == 1
    c.bind_model_file("m", "a" * 64, "pkg:x (/x.gguf)")       # the first file still is
    c.close()


def test_failures_are_not_cached_and_are_counted(tmp_path):
    db = tmp_path / "c.sqlite"
    b = ScriptedBackend(lambda r: L.ChatResult(error="boom"), cache=L.ResponseCache(db))
    out = b.chat_batch([req("a")])
    assert out[0].error == "boom" and b.usage()["failed"] == 1
    assert len(L.ResponseCache(db)) == 0


def test_duplicate_requests_in_a_batch_make_one_call():
    b = ScriptedBackend(echo)
    out = b.chat_batch([req("a"), req("a"), req("b")])
    assert [r.text for r in out] == ["echo:a", "echo:a", "echo:b"] and len(b.seen) == 2


def test_usage_accounting():
    b = ScriptedBackend(lambda r: L.ChatResult(text="ok", prompt_tokens=10, completion_tokens=3))
    b.chat_batch([req("a"), req("b"), req("c")])
    u = b.usage()
    assert (u["calls"], u["failed"], u["tokens_in"], u["tokens_out"]) == (3, 0, 30, 9)
    assert u["wall_s"] >= 0
    d = b.describe()
    assert d["llm_backend"] == "scripted" and d["llm_model"] == "scripted"
    b.reset_usage()
    assert b.usage()["calls"] == 0


def test_run_with_parser_retries_as_new_calls(tmp_path):
    # attempt 0 answers garbage for "bad", attempt 1 answers correctly; "never" never parses
    def respond(r):
        t = r.messages[0]["content"]
        if t == "good" or (t == "bad" and r.attempt >= 1):
            return r"\boxed{2}"
        return "no idea"

    db = tmp_path / "c.sqlite"
    b = ScriptedBackend(respond, cache=L.ResponseCache(db))
    out = L.run_with_parser(b, [req("good"), req("bad"), req("never")], L.parse_boxed_choice, retries=2)
    assert out[:2] == ["2", "2"]
    assert isinstance(out[2], L.Failure) and "no \\boxed" in out[2].reason and out[2].attempts == 3
    assert out[2].text == "no idea"
    assert [(r.messages[0]["content"], r.attempt) for r in b.seen] == [
        ("good", 0), ("bad", 0), ("never", 0), ("bad", 1), ("never", 1), ("never", 2)]
    # a rerun serves what parsed from the cache (also "bad"'s garbage before its good retry) and asks
    # the model again only for the request that never parsed: its answers were not kept
    b2 = ScriptedBackend(respond, cache=L.ResponseCache(db))
    out2 = L.run_with_parser(b2, [req("good"), req("bad"), req("never")], L.parse_boxed_choice, retries=2)
    assert out2[:2] == ["2", "2"] and isinstance(out2[2], L.Failure)
    assert [(r.messages[0]["content"], r.attempt) for r in b2.seen] == [("never", 0), ("never", 1), ("never", 2)]


def test_run_with_parser_reports_call_errors_and_truncation():
    b = ScriptedBackend(lambda r: L.ChatResult(error="HTTP 400"))
    out = L.run_with_parser(b, [req("x")], L.parse_json_object, retries=1)
    assert isinstance(out[0], L.Failure) and "HTTP 400" in out[0].reason and len(b.seen) == 2
    b = ScriptedBackend(lambda r: L.ChatResult(text='{"a": ', finish_reason="length"))
    out = L.run_with_parser(b, [req("x")], L.parse_json_object, retries=0)
    assert "max_tokens" in out[0].reason and not out[0]


def lp_backend(table):
    """Scripted log-probabilities: table[(first, second)] = {option: logprob}."""
    def respond(r):
        assert r.logprobs_for == ("1", "2") and r.max_tokens == 1 and r.prefill == "\\boxed{"
        c = r.messages[1]["content"]
        first = c.split("## Candidate 1\nProblem:\n")[1].split("\n")[0]
        second = c.split("## Candidate 2\nProblem:\n")[1].split("\n")[0]
        return L.ChatResult(text="", logprobs=table[(first, second)])
    return ScriptedBackend(respond)


def pair(a, b):
    return prompts.request("pairwise_judge_logprob", query_problem="Q", query_solution="QS",
                           problem_1=a, solution_1="s", problem_2=b, solution_2="s")


def test_logprob_pairwise_combines_both_orders():
    table = {
        # A is preferred when shown first, but B more strongly when shown first: B wins overall
        ("A", "B"): {"1": -0.5, "2": -1.0}, ("B", "A"): {"1": -0.2, "2": -2.0},
        ("C", "D"): {"1": -1.0, "2": -1.0}, ("D", "C"): {"1": -1.0, "2": -1.0},
        ("E", "F"): {"1": None, "2": -3.0}, ("F", "E"): {"1": -0.1, "2": -0.2},
        ("G", "H"): {"1": None, "2": None}, ("H", "G"): {"1": -0.1, "2": -0.2},
    }
    b = lp_backend(table)
    ab = [pair("A", "B"), pair("C", "D"), pair("E", "F"), pair("G", "H")]
    ba = [pair("B", "A"), pair("D", "C"), pair("F", "E"), pair("H", "G")]
    out = L.logprob_pairwise(b, ab, ba)
    # A vs B: margin = (-0.5 - -1.0) + (-2.0 - -0.2) = 0.5 - 1.8 = -1.3 -> b
    assert out[:3] == ["b", "tie", "b"]
    assert isinstance(out[3], L.Failure) and "neither" in out[3].reason
    res = b.choice_logprobs([pair("A", "B"), pair("B", "A")])
    assert math.isclose(L.logprob_margin(res[0], res[1]), -1.3)


def test_make_backend_errors_and_cache_location(tmp_path):
    with pytest.raises(L.LLMError, match="llm.backend is 'none'"):
        L.make_backend({"backend": "none", "model": "m"})
    with pytest.raises(L.LLMError, match="unknown backend"):
        L.make_backend({"backend": "magic", "model": "m"})
    assert L.llm_cache_path({"cache": "run"}, tmp_path / "run", tmp_path / "c") == tmp_path / "run" / "llm_cache.sqlite"
    assert L.llm_cache_path({"cache": "shared"}, tmp_path / "run", tmp_path / "c") == tmp_path / "c" / "llm_cache.sqlite"
    with pytest.raises(L.LLMError, match="model_path"):
        L.make_backend({"backend": "llamacpp", "model": "m", "model_path": str(tmp_path / "missing.gguf")})


def test_vllm_missing_names_what_to_install():
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    if spec is not None and spec.origin is not None:  # (tests/vllm is a namespace package, origin None)
        pytest.skip("vllm is installed here")
    with pytest.raises(L.LLMError, match="vllm"):
        L.make_backend({"backend": "vllm", "model": "m"})


def test_profiles_llm_sections_build_or_fail_clearly(project_root):
    from saber_lib.core.config import load_profile

    paper = load_profile(project_root / "params" / "paper.yaml").section("llm")
    assert paper["backend"] == "vllm" and paper["model"] == "openai/gpt-oss-120b"
    assert paper["temperature"] == 1.0 and paper["reasoning_effort"] == "high"
    b = ScriptedBackend(echo, temperature=paper["temperature"], max_tokens=paper["max_tokens"],
                        reasoning_effort=paper["reasoning_effort"])
    assert b.resolve(req("x")).temperature == 1.0 and b.resolve(req("x")).max_tokens == paper["max_tokens"]
