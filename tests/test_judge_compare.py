"""Replaying recorded log-probability judgments through another backend and comparing the answers
(saber_lib.llm.cassette.judgment_requests, saber_lib.validation.judge_report), without any model."""
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from saber_lib import llm as L
from saber_lib.llm import models
from saber_lib.llm.cassette import judgment_requests
from saber_lib.validation import judge_report as R

ROOT = Path(__file__).resolve().parent.parent
CASSETTE = ROOT / "tests" / "fixtures" / "real_llm" / "llm-cpu.jsonl"


def entry(query, first, second, lp1, lp2, latency=1.0, attempt=0, template="pairwise_judge_logprob"):
    return {"key": f"{query}/{first}/{second}/{attempt}", "template": template,
            "meta": {"template": template, "query": query, "first": first, "second": second},
            "messages": [{"role": "user", "content": f"{query}: {first} or {second}?"},
                         {"role": "assistant", "content": "\\boxed{"}],
            "temperature": 0.0, "max_tokens": 1, "logprobs_for": ["1", "2"], "attempt": attempt,
            "text": "", "logprobs": {"1": lp1, "2": lp2}, "latency_s": latency, "error": None}


def test_recorded_judgments_are_rebuilt_exactly():
    entries = L.load_cassette(CASSETTE)
    reqs = judgment_requests(entries)
    recorded = [e for e in entries if e["template"] == "pairwise_judge_logprob" and e["attempt"] == 0]
    assert len(reqs) == len(recorded) and len(reqs) % 2 == 0
    for ab, ba in zip(reqs[::2], reqs[1::2]):  # pair by pair, both orders, the candidates swapped
        assert ab.meta["query"] == ba.meta["query"]
        assert (ab.meta["first"], ab.meta["second"]) == (ba.meta["second"], ba.meta["first"])
        assert ab.prefill == "\\boxed{" and ab.logprobs_for == ("1", "2")
    few = judgment_requests(entries, pairs=2)
    assert few == reqs[:4]
    # the very requests that were recorded: the replay backend finds each by its key
    replay = L.make_backend({"backend": "replay", "model": entries[0]["model"], "cassette": str(CASSETTE),
                             "temperature": 1.0, "max_tokens": 1024, "reasoning_effort": None}, None, progress=False)
    by_key = {e["key"]: e for e in recorded}
    for req, res in zip(few, replay.chat_batch(few)):
        assert res.logprobs == by_key[replay.cache_key(req)]["logprobs"]


def test_only_pairs_with_both_orders_and_first_attempts():
    entries = [entry("q", "x", "y", -0.1, -2.0), entry("q", "z", "w", -1.0, -0.5),  # z/w: one order only
               entry("q", "y", "x", -0.3, -1.0), entry("q", "x", "y", -5.0, -0.1, attempt=1000),
               entry("q", "x", "y", -0.1, -2.0, template="ordinal_judge_score")]
    reqs = judgment_requests(entries)
    assert [(r.meta["first"], r.meta["second"]) for r in reqs] == [("x", "y"), ("y", "x")]
    assert all(r.attempt == 0 for r in reqs)


def test_pearson_by_hand():
    assert R.pearson([1, 2, 3], [1, 3, 2]) == pytest.approx(0.5)
    assert R.pearson([1, 2, 3], [6, 4, 2]) == pytest.approx(-1.0)
    assert R.pearson([1, 2, math.inf], [1, 3, 2]) == pytest.approx(1.0)  # the non-finite point is left out
    assert math.isnan(R.pearson([1], [2])) and math.isnan(R.pearson([1, 1, 1], [1, 2, 3]))


def ref_and_other():
    # picks per order (the number favoured): x/y 1, y/x 1 (both "first"); u/v 2, v/u 1 (v twice);
    # s/t 1, t/s tie
    ref = [entry("q", "x", "y", -0.1, -2.0, 10.0), entry("q", "y", "x", -0.3, -1.0, 12.0),
           entry("q", "u", "v", -1.0, -0.5, 8.0), entry("q", "v", "u", -0.2, -0.9, 9.0),
           entry("p", "s", "t", -0.6, -0.8, 7.0), entry("p", "t", "s", -0.7, -0.7, 7.0)]
    # the other backend saw pair (u, v) shown the other way round first, and disagrees on (s, t)
    other = [entry("q", "x", "y", -0.2, -1.0, 20.0), entry("q", "y", "x", -0.4, -0.6, 22.0),
             entry("q", "v", "u", -0.1, -1.5, 30.0), entry("q", "u", "v", -0.8, -0.4, 31.0),
             entry("p", "s", "t", -0.9, -0.5, 25.0), entry("p", "t", "s", -0.6, -0.8, 26.0)]
    return ref, other


def test_pair_and_order_tables_by_hand():
    ref, other = ref_and_other()
    pairs = R.pair_table(ref, other)
    assert pairs.select("query_id", "a", "b").rows() == [("q", "x", "y"), ("q", "u", "v"), ("p", "s", "t")]
    # evidence for a: [lp(1) - lp(2)] with a first, minus the same with a second
    assert pairs["margin_ref"].to_list() == pytest.approx([1.9 - 0.7, -0.5 - 0.7, 0.2 - 0.0])
    assert pairs["margin_other"].to_list() == pytest.approx([0.8 - 0.2, -0.4 - 1.4, -0.4 - 0.2])
    assert pairs["verdict_ref"].to_list() == ["a", "b", "a"]
    assert pairs["verdict_other"].to_list() == ["a", "b", "b"]
    assert pairs["agree"].to_list() == [True, True, False]
    orders = R.order_table(ref, other)
    assert orders.select("first", "second").rows() == [("x", "y"), ("y", "x"), ("u", "v"), ("v", "u"),
                                                       ("s", "t"), ("t", "s")]
    assert orders["pick_ref"].to_list() == ["1", "1", "2", "1", "1", "tie"]
    assert orders["pick_other"].to_list() == ["1", "1", "2", "1", "2", "1"]
    assert orders["s_other"].to_list() == [20.0, 22.0, 31.0, 30.0, 25.0, 26.0]  # matched by who was shown first
    s = R.summary(pairs, orders)
    assert (s["pairs"], s["pair_agree"], s["orders"], s["order_agree"]) == (3, 2, 6, 4)
    assert s["r_pair_margin"] == pytest.approx(R.pearson([1.2, -1.2, 0.2], [0.6, -1.8, -0.6]))
    assert s["s_per_call_ref"] == pytest.approx(53 / 6) and s["s_per_call_other"] == pytest.approx(154 / 6)


def test_report_names_backends_and_escapes_ids(tmp_path):
    ref, other = ref_and_other()
    ref[0]["meta"]["first"] = ref[1]["meta"]["second"] = "src:a|b"
    other[0]["meta"]["first"] = other[1]["meta"]["second"] = "src:a|b"
    paths = []
    for name, entries in (("ref", ref), ("other", other)):
        paths.append(tmp_path / f"{name}.jsonl")
        paths[-1].write_text("".join(json.dumps(e) + "\n" for e in entries))
    (tmp_path / "other.run.json").write_text(json.dumps({"load_s": 42.5, "requests": 6, "calls_s": 154.0,
                                                         "failed": 0}))
    out = tmp_path / "r.md"
    assert R.main(["--cassette", str(paths[0]), "--other", str(paths[1]), "--out", str(out),
                   "--what", "Model M (weights W)", "--command", "cmd"]) == 0
    text = out.read_text()
    assert "agrees on 2/3" in text and "same candidate picked in 4/6" in text
    assert "vLLM: load 42.5 s, 6 requests" in text and "Model M (weights W)" in text
    assert "| margin llama.cpp |" in text and "src:a\\|b" in text
    for line in text.splitlines():  # the "|" inside the id does not split a cell
        if line.startswith("| query_id |"):
            width = len(re.split(r"(?<!\\)\|", line))
        if line.startswith("| q | src:a"):
            assert len(re.split(r"(?<!\\)\|", line)) == width
    assert R.main(["--cassette", str(paths[0]), "--other", str(CASSETTE), "--out", str(out),
                   "--what", "w"]) == 2  # nothing in common


def test_hf_copy_reuses_a_finished_conversion(tmp_path):
    name = "qwen2.5-coder-1.5b-instruct-q4_k_m"
    dest = tmp_path / "hf-models" / f"{name}-bfloat16"
    dest.mkdir(parents=True)
    (dest / models.HF_SOURCE).write_text(json.dumps({"gguf_sha256": models.SPLIT_MODELS[name].sha256}))
    assert models.hf_copy(name, tmp_path) == dest  # no GGUF, no transformers needed
    with pytest.raises(L.LLMError, match="not a known model"):
        models.hf_copy("no-such-model", tmp_path)


class _Config:
    def __init__(self):
        self.quantization_config = {"quant_method": "gguf"}


class _Module:
    pass


class GgufLinear:  # the class name transformers gives a layer it keeps in GGUF blocks
    pass


class _Model:
    def __init__(self, *modules):
        self.modules = modules
        self.hf_quantizer = object()
        self.is_quantized = True
        self.config = _Config()

    def named_modules(self):
        return [(f"layer{k}", m) for k, m in enumerate(self.modules)]


def test_a_dequantized_gguf_model_loses_its_quantizer_before_saving():
    model = _Model(_Module(), _Module())
    models._drop_gguf_quantizer(model, "m.gguf")
    assert model.hf_quantizer is None and not model.is_quantized
    assert not hasattr(model.config, "quantization_config")  # config.json must not ask for GGUF kernels
    packed = _Model(_Module(), GgufLinear())
    with pytest.raises(L.LLMError, match="m.gguf: transformers kept 1 modules in GGUF blocks .*layer1"):
        models._drop_gguf_quantizer(packed, "m.gguf")
    assert packed.hf_quantizer is not None


def test_replay_then_report_as_the_compare_tool_runs_them(tmp_path):
    # the two Python steps of tools/vllm_cpu_compare.sh, as subprocesses, with the replay backend in
    # place of vLLM: the recorded answers asked again must agree with themselves exactly
    profile = tmp_path / "replay.yaml"
    profile.write_text(f"inherit: {ROOT / 'params' / 'llm-cpu.yaml'}\n"
                       f"llm:\n  backend: replay\n  cassette: {CASSETTE}\n")
    other, out = tmp_path / "other.jsonl", tmp_path / "report.md"
    run = subprocess.run([sys.executable, "-m", "saber_lib.validation.judge_replay", "--params", str(profile),
                          "--pairs", "3", "--record", str(other)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert run.returncode == 0, run.stderr
    info = json.loads((tmp_path / "other.run.json").read_text())
    assert (info["backend"], info["requests"], info["failed"]) == ("replay", 6, 0)
    rep = subprocess.run([sys.executable, "-m", "saber_lib.validation.judge_report", "--other", str(other),
                          "--out", str(out), "--names", "recorded", "replayed", "--what", "the recording twice"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert rep.returncode == 0, rep.stderr
    text = out.read_text()
    assert "agrees on 3/3" in text and "same candidate picked in 6/6" in text
    assert re.search(r"Pearson r of the margins: 1\.000 over pairs", text), text[:600]


def test_the_compare_tool_refuses_an_unknown_argument():
    r = subprocess.run(["bash", str(ROOT / "tools" / "vllm_cpu_compare.sh"), "--bogus"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 2 and "unknown argument --bogus" in r.stderr
