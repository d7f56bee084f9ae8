"""Fault cases of the replay backend (``saber_lib.llm.cassette``): a cassette that holds one key twice
with different answers (an altered copy placed first was served), a cassette recorded with another
model file than the profile's (``model_sha256`` was never compared), and lines that plain
``json.loads`` reads one way among several (a key twice in one object, NaN). Each is an error naming
the file and the line(s); identical duplicates still replay.

Cassettes built from lines of the committed real-model cassette (tests/fixtures/real_llm).
"""
import json
from pathlib import Path

import pytest

from saber_lib import llm as L
from saber_lib.llm.models import SPLIT_MODELS

ROOT = Path(__file__).resolve().parents[2]
CASSETTE = ROOT / "tests" / "fixtures" / "real_llm" / "llm-cpu.jsonl"
MODEL = "qwen2.5-coder-1.5b-instruct-q4_k_m"
PROFILE_LLM = {"backend": "replay", "model": MODEL, "model_path": f"cache:{MODEL}"}   # as params/llm-cpu.yaml


def recorded() -> list[dict]:
    return [json.loads(x) for x in CASSETTE.read_text().splitlines() if x.strip()]


def write(path: Path, entries) -> Path:
    path.write_text("".join((e if isinstance(e, str) else json.dumps(e)) + "\n" for e in entries))
    return path


def replay(path: Path, **llm):
    return L.make_backend({**PROFILE_LLM, "cassette": str(path), **llm}, None, progress=False)


def request_of(e: dict) -> L.ChatRequest:
    return L.ChatRequest(messages=list(e["messages"]), temperature=e["temperature"], max_tokens=e["max_tokens"],
                         json_schema=e["json_schema"],
                         choices=tuple(e["choices"]) if e["choices"] is not None else None,
                         logprobs_for=tuple(e["logprobs_for"]) if e["logprobs_for"] is not None else None,
                         attempt=e["attempt"], meta=dict(e["meta"]))


def test_the_committed_cassette_replays_under_its_profiles_model():
    entries = recorded()
    assert {e["model_sha256"] for e in entries} == {SPLIT_MODELS[MODEL].sha256}
    b = replay(CASSETTE)
    e = entries[0]
    assert b.cache_key(request_of(e)) == e["key"]
    assert b.chat_batch([request_of(e)])[0].text == e["text"]


def test_one_key_with_two_different_answers_is_an_error_naming_both_lines(tmp_path):
    # old: the first of the two lines was served, without a word
    entries = recorded()[:3]
    altered = {**entries[1], "text": entries[1]["text"] + " (edited)"}
    path = write(tmp_path / "c.jsonl", [entries[0], altered, entries[2], entries[1]])
    with pytest.raises(L.LLMError) as err:
        replay(path)
    msg = str(err.value)
    assert str(path) in msg and "lines 2 and 4" in msg and entries[1]["key"] in msg and "text differs" in msg

    # a duplicate with the same answer (another recording's timing) is fine and replays it
    same = {**entries[1], "latency_s": entries[1]["latency_s"] + 1.0}
    b = replay(write(tmp_path / "ok.jsonl", [entries[0], entries[1], entries[2], same]))
    assert b.chat_batch([request_of(entries[1])])[0].text == entries[1]["text"]


def test_a_cassette_of_another_model_file_is_an_error_naming_the_file(tmp_path):
    # old: model_sha256 was written when recording and never read
    entries = recorded()[:3]
    other = {**entries[2], "model_sha256": "0" * 64}
    path = write(tmp_path / "c.jsonl", [entries[0], entries[1], other])
    with pytest.raises(L.LLMError) as err:
        replay(path)
    msg = str(err.value)
    assert f"{path}:3" in msg and "0" * 64 in msg and SPLIT_MODELS[MODEL].sha256 in msg
    # a profile naming a local model file: that file's hash is the one compared
    model_file = tmp_path / "m.gguf"
    model_file.write_bytes(b"GGUF not the recorded model")
    with pytest.raises(L.LLMError, match=r"c\.jsonl:1: recorded with model file sha256"):
        replay(write(tmp_path / "c.jsonl", entries), model_path=str(model_file))


@pytest.mark.parametrize("bad, why", [
    (lambda line: line.replace('"text": ', '"text": "served?", "text": ', 1), "appears twice"),
    (lambda line: line.replace('"logprobs": null', '"logprobs": {"1": NaN, "2": -1.0}', 1), "NaN"),
    (lambda line: line.replace('"logprobs": null', '"logprobs": {"1": -Infinity, "2": -1.0}', 1), "Infinity"),
], ids=["key-twice", "nan", "infinity"])
def test_an_ambiguous_json_line_is_an_error_naming_file_and_line(tmp_path, bad, why):
    # old: json.loads kept the last of two "text" keys, and read NaN as a float (a tie between orders)
    lines = CASSETTE.read_text().splitlines()[:3]
    target = next(i for i, x in enumerate(lines) if '"logprobs": null' in x)
    lines[target] = bad(lines[target])
    assert lines[target] != CASSETTE.read_text().splitlines()[target]
    json.loads(lines[target])                       # what a plain reader accepts without a word
    path = write(tmp_path / "c.jsonl", lines)
    with pytest.raises(L.LLMError) as err:
        replay(path)
    assert f"{path}:{target + 1}:" in str(err.value) and why in str(err.value)
