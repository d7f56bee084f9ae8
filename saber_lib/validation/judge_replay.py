"""Recorded log-probability judgments asked again, exactly as recorded, through another backend.

``python -m saber_lib.validation.judge_replay --record OUT.jsonl [--pairs N] --backend vllm --model-path DIR ...``
takes the first-attempt ``pairwise_judge_logprob`` requests of a cassette (by default the recorded
CPU run, ``tests/fixtures/real_llm/llm-cpu.jsonl``) for the first ``--pairs`` candidate pairs judged
in both orders (:func:`saber_lib.llm.cassette.judgment_requests`), sends them one per call to the
backend that ``--params`` and the options describe (``llm.*`` overrides, checked by the profile
schema), and records its answers as a cassette
``OUT.jsonl`` beside ``OUT.run.json`` (backend, model, engine settings, seconds to load the
backend, seconds for all calls). No response cache: every request reaches the model.
``python -m saber_lib.validation.judge_report`` compares the two cassettes;
``tools/vllm_cpu_compare.sh`` runs both with vLLM's CPU build.

This module needs only the configuration and the LLM layer, so it runs in vLLM's own environment.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ..core import config
from ..core.data import PROJECT_ROOT
from ..llm import load_cassette, make_backend
from ..llm.cassette import judgment_requests
from ..llm.types import LLMError
from ..core.config_types import ProfileError

DEFAULT_CASSETTE = PROJECT_ROOT / "tests" / "fixtures" / "real_llm" / "llm-cpu.jsonl"


def run_path(record: str | Path) -> Path:
    """Where :func:`main` writes the run's settings and times for cassette ``record``."""
    record = Path(record)
    return record.with_name(record.name.removesuffix(".jsonl") + ".run.json")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m saber_lib.validation.judge_replay",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--params", default=str(PROJECT_ROOT / "params" / "llm-cpu.yaml"))
    ap.add_argument("--cassette", default=str(DEFAULT_CASSETTE), help="the recorded judgments")
    ap.add_argument("--template", default="pairwise_judge_logprob")
    ap.add_argument("--pairs", type=int, default=None, help="the first N pairs (both orders each); default all")
    ap.add_argument("--record", required=True, help="where this backend's answers are recorded (JSON Lines)")
    ap.add_argument("--backend", help="llm.backend (default: the profile's)")
    ap.add_argument("--model", help="llm.model: the name recorded in the cassette")
    ap.add_argument("--model-path", help="llm.model_path (for vllm: a Hugging Face folder)")
    ap.add_argument("--max-model-len", type=int, help="llm.max_model_len")
    ap.add_argument("--engine-kwargs", type=json.loads, help="llm.engine_kwargs as a JSON object")
    ap.add_argument("--tensor-parallel-size", type=int, default=1,
                    help="llm.tensor_parallel_size (default 1: the profiles inherit the paper's 8 GPUs)")
    args = ap.parse_args(argv)
    if args.pairs is not None and args.pairs < 1:
        ap.error("--pairs must be >= 1")
    record = Path(args.record).resolve()
    try:
        over = {f"llm.{key}": value for key, value in (
            ("backend", args.backend), ("model", args.model), ("model_path", args.model_path),
            ("max_model_len", args.max_model_len), ("engine_kwargs", args.engine_kwargs),
            ("tensor_parallel_size", args.tensor_parallel_size)) if value is not None}
        over.update({"llm.record": str(record), "llm.max_concurrency": 1})
        llm = config.load_profile(args.params, over).section("llm")
        requests = judgment_requests(load_cassette(args.cassette), args.template, args.pairs)
        if not requests:
            raise LLMError(f"{args.cassette}: no {args.template} pair recorded in both orders")
        record.unlink(missing_ok=True)  # a fresh record: every answer below comes from this run
        t0 = time.perf_counter()
        backend = make_backend(llm, None, progress=False)
        load_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        results = [backend.chat_batch([req])[0] for req in requests]  # one call at a time: seconds per call
        calls_s = time.perf_counter() - t0
        backend.close()
    except (ProfileError, LLMError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    failed = [r.error for r in results if r.error]
    info = {"backend": llm["backend"], "model": llm["model"], "model_path": llm.get("model_path"),
            "engine_kwargs": llm.get("engine_kwargs") or {}, "max_model_len": llm.get("max_model_len"),
            "cassette": str(args.cassette), "template": args.template, "requests": len(requests),
            "failed": len(failed), "load_s": round(load_s, 2), "calls_s": round(calls_s, 2)}
    run_path(record).write_text(json.dumps(info, indent=1) + "\n")
    print(json.dumps(info))
    if failed:
        print(f"error: {len(failed)} of {len(requests)} requests failed; first: {failed[0]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
