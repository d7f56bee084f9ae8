"""The LLM steps of ``params/llm-cpu.yaml`` with another backend, compared with the recorded CPU answers.

``python -m saber_lib.pipeline.llm_check --record OUT.jsonl [--set llm.backend=vllm ...]`` runs
:func:`saber_lib.studies.llm_stages.run_llm_stages` on the inputs exported from the recorded run
(``tests/fixtures/real_llm/inputs``) with the backend the profile and the ``--set`` items describe,
records its answers as a cassette, and prints per template the requests, parse failures and
seconds per call of both cassettes, the judge's order agreement and first-position share for both,
and how often the two models' pairwise verdicts agree. ``tools/gpu_check.sh`` runs it on a GPU.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import polars as pl

from ..core import config
from ..core.data import PROJECT_ROOT
from ..llm import load_cassette, make_backend
from ..studies import llm_stages
from ..validation import real_llm
from .cli import _overrides
from ..core.config_types import ProfileError

FIXTURES = PROJECT_ROOT / "tests" / "fixtures" / "real_llm"


def compare(cpu: list[dict], other: list[dict], names=("cpu", "other")) -> dict[str, pl.DataFrame]:
    """Section tables of two cassettes side by side, and the agreement of their pairwise verdicts."""
    t = [real_llm.template_table(c).select("template", pl.col("requests").alias(f"requests_{n}"),
                                    pl.col("parse_failure_rate").alias(f"parse_failure_rate_{n}"),
                                    pl.col("mean_s").alias(f"mean_s_{n}"))
         for c, n in zip((cpu, other), names)]
    templates = t[0].join(t[1], on="template", how="full", coalesce=True).sort("template")
    orders = [real_llm.judge_orders(c) for c in (cpu, other)]
    judge = pl.DataFrame([{"cassette": n, **real_llm.judge_summary(o)} for n, o in zip(names, orders)])
    both = orders[0].join(orders[1], on=["query_id", "a", "b"], suffix="_2")
    swapped = orders[0].join(orders[1].rename({"a": "b", "b": "a"}), on=["query_id", "a", "b"], suffix="_2")
    flip = {"a": "b", "b": "a", "tie": "tie"}
    same = both.select(pl.col("verdict") == pl.col("verdict_2"))["verdict"].to_list() + [
        v == flip[w] for v, w in zip(swapped["verdict"], swapped["verdict_2"])]
    agreement = pl.DataFrame([{"pairs_in_both": len(same),
                               "verdict_agreement": sum(same) / len(same) if same else float("nan")}])
    return {"templates": templates, "judge": judge, "agreement": agreement}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m saber_lib.pipeline.llm_check", description=__doc__.splitlines()[0])
    ap.add_argument("--params", default=str(PROJECT_ROOT / "params" / "llm-cpu.yaml"))
    ap.add_argument("--inputs", default=str(FIXTURES / "inputs"))
    ap.add_argument("--cassette", default=str(FIXTURES / "llm-cpu.jsonl"), help="the recorded CPU answers")
    ap.add_argument("--record", required=True, help="where this backend's answers are recorded (JSON Lines)")
    ap.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE", help="override one parameter")
    args = ap.parse_args(argv)
    try:
        over = _overrides(args.set)
        over["llm.record"] = str(Path(args.record).resolve())
        profile = config.load_profile(args.params, over)
    except ProfileError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    params = llm_stages.stage_params(profile)
    backend = make_backend(params["llm"], None)
    with tempfile.TemporaryDirectory() as work:
        llm_stages.run_llm_stages(llm_stages.load_llm_inputs(args.inputs), params, backend, work)
    backend.close()
    tables = compare(load_cassette(args.cassette), load_cassette(args.record),
                     names=("cpu", params["llm"]["backend"]))
    with pl.Config(tbl_rows=50, tbl_cols=20, tbl_width_chars=200):
        for name, table in tables.items():
            print(f"== {name}")
            print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
