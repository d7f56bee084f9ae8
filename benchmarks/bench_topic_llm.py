"""The real model's topic walk alone: the recorded run's topic sample walked again through a live backend.

    python benchmarks/bench_topic_llm.py [--params params/llm-cpu.yaml] [--threads 1] [--record OUT.jsonl]
                                         [--main-topics RUN/topics/topics.parquet] [--write-topics OUT.parquet]

Walks the problems of ``tests/fixtures/real_llm/inputs/topics_sample.parquet`` (the llm-cpu profile's
topic sample) with the profile's LLM (``llamacpp`` with the installed model for ``params/llm-cpu.yaml``)
exactly as the topics stage does (same clipping, depth and retries), without the rest of the
8-minute profile run. ``--record`` appends every request and raw answer to a cassette (as
``llm.record`` does), ready to replace the ``topic_scoring`` entries of the recorded cassette.
Prints, per problem, the domains, whether the answer gave some label exactly 1.0, its failure reason
if any, and the seconds per call; with ``--main-topics`` (a run's embedding-scorer topics table) the
overlap of the domains with that scorer's; ``--write-topics`` writes the walk's topics table (what the
stage writes to ``topics/llm_sample.parquet``). Prints numbers; asserts nothing; without the model
installed (``make install-llm``) it says so and measures nothing.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import polars as pl

from saber_lib.core import config
from saber_lib import llm as L
from saber_lib.llm.parsers import check_best_at_one, parse_json_object, topic_score_object
from saber_lib.ontology.tree import ontology_from_nodes
from saber_lib.studies import llm_stages
from saber_lib.topics import LLMTopicScorer
from saber_lib.topics.assign import domain_overlap
from saber_lib.topics.llm_sample import llm_walk

ROOT = Path(__file__).resolve().parent.parent
INPUTS = ROOT / "tests" / "fixtures" / "real_llm" / "inputs"


def best_at_one(text: str) -> bool:
    """Whether a raw answer keeps the prompt's contract, some label at exactly 1.0
    (:func:`saber_lib.llm.parsers.check_best_at_one`, the parsers' own check)."""
    try:
        scores = topic_score_object(parse_json_object(text))
        check_best_at_one(scores)
    except (ValueError, TypeError):   # no JSON object, a score that is no number, or no 1.0
        return False
    return bool(scores)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default=str(ROOT / "params" / "llm-cpu.yaml"))
    ap.add_argument("--threads", type=int, default=None, help="llm.cpu_threads (default: the profile's)")
    ap.add_argument("--record", default=None, help="append requests and answers to this cassette")
    ap.add_argument("--main-topics", default=None, help="a run's topics table (topics/topics.parquet)")
    ap.add_argument("--write-topics", default=None, help="write the walk's topics table here")
    args = ap.parse_args()
    sets = {}
    if args.threads:
        sets["llm.cpu_threads"] = args.threads
    if args.record:
        sets["llm.record"] = args.record
    params = llm_stages.stage_params(config.load_profile(Path(args.params), sets))
    inputs = llm_stages.load_llm_inputs(INPUTS)
    onto = ontology_from_nodes(inputs["ontology"])
    sample = inputs["topics_sample"].select("doc_id").join(inputs["corpus"], on="doc_id", how="left")
    llm = params["llm"]
    with tempfile.TemporaryDirectory() as tmp:
        try:
            backend = L.make_backend(llm, Path(tmp) / "llm_cache.sqlite", progress=False)
        except L.LLMError as e:   # the model is an opt-in install (make install-llm)
            print(f"skipped: no {llm['backend']} model ({e})")
            return
        scorer = LLMTopicScorer(backend, retries=params["topic_retries"], guided=bool(llm.get("guided_json", False)))
        seen = []
        chat = backend.chat_batch

        def watched(reqs, desc=None):   # keep the raw answers to say which ones hold a 1.0
            res = chat(reqs, desc=desc)
            seen.extend(res)
            return res

        backend.chat_batch = watched
        t0 = time.perf_counter()
        topics, result = llm_walk(onto, sample, scorer, clip=llm.get("text_max_words", 0), tau=params["tau"],
                                  score_root=params["topic_score_root"], max_depth=params["topic_llm_max_depth"])
        wall = time.perf_counter() - t0
    if args.write_topics:
        topics.write_parquet(args.write_topics)
    reasons = {p: r for p, _, r in result.failures}
    print(f"model {llm['model']} via {llm['backend']}, threads {llm.get('cpu_threads')}, "
          f"{sample.height} problems, {len(seen)} calls, {wall:.1f} s ({wall / max(1, len(seen)):.1f} s per call)")
    for k, (doc, doms) in enumerate(zip(topics["doc_id"], topics["domains"])):
        print(f"  {doc}: domains {list(doms)}" + (f"; failed: {reasons[k]}" if k in reasons else ""))
    ones = sum(best_at_one(r.text) for r in seen)
    print(f"answers with a label at exactly 1.0: {ones} / {len(seen)}")
    for r in seen:
        print("  answer:", json.dumps(r.text)[:400])
    if args.main_topics:
        main_topics = pl.read_parquet(args.main_topics)
        ov = domain_overlap(topics, main_topics)
        print(f"overlap with {args.main_topics}: same domains {ov['same']:.2f}, at least one shared "
              f"{ov['shared']:.2f}, mean Jaccard {ov['jaccard']:.2f}")
        both = topics.select("doc_id", "domains").join(main_topics.select("doc_id", pl.col("domains").alias("main")),
                                                        on="doc_id")
        for doc, a, b in both.iter_rows():
            print(f"  {doc}: llm {list(a)} | main {list(b)}")


if __name__ == "__main__":
    main()
