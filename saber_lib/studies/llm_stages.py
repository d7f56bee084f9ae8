"""The LLM work of the pipeline's stages on a fixed, small set of inputs, with any backend.

:func:`export_inputs` copies from a finished run (``params/llm-cpu.yaml``) what its LLM steps read:
the ontology's first level, the corpus rows involved, the benchmark, and what the stages wrote
(topic and summary samples, tournament judgments and ratings, the math-vs-words split, the judge
validation pairs and labels). :func:`run_llm_stages` does those LLM steps again with the same
library calls as the notebooks (topic walk, summaries, Swiss tournament with the profile's judge,
LaTeX formatting, judge validation methods), so that

* with ``llm.backend: replay`` on the run's cassette, the tests check in seconds that the parsers,
  the prefill, guided JSON, the log-probability reading, the tournament and the failure budget
  still give what the real model's answers gave (``tests/test_real_llm_replay.py``);
* with another backend (``vllm`` on a GPU, ``tools/gpu_check.sh``) the same requests go to another
  model and :mod:`saber_lib.validation.real_llm` compares the two.
"""
from __future__ import annotations

from pathlib import Path

import polars as pl

from ..judging.judges import OrdinalJudge, SwappedJudge
from ..judging.registry import JudgeSettings
from ..judging.spec_judges import judge_from_profile
from ..judging.tournament import corpus_docs, run_tournament
from ..ontology.tree import ontology_from_nodes
from ..summaries.stage import llm_summaries
from ..topics import LLMTopicScorer
from ..topics.llm_sample import llm_walk
from ..validation import agreement as ag
from . import math_words as mw

FILES = {  # inputs/<name>.parquet <- <run>/<stage>/<file>
    "benchmark": ("select", "benchmark.parquet"),
    "topics_sample": ("topics", "llm_sample.parquet"),
    "summaries_sample": ("summaries", "llm_sample.parquet"),
    "judgments": ("tournament", "judgments.parquet"),
    "ratings": ("tournament", "ratings.parquet"),
    "mvw_split": ("math_vs_words", "split_queries.parquet"),
    "mvw_dropped": ("math_vs_words", "dropped_queries.parquet"),
    "jv_pairs": ("judge_validation", "pairs.parquet"),
    "jv_labels": ("judge_validation", "labels.parquet"),
}


def export_inputs(run_dir, out_dir) -> list[Path]:
    """Write ``out_dir/<name>.parquet`` for every entry of :data:`FILES`, plus ``corpus`` (the rows
    the LLM steps read) and ``ontology`` (the tree's nodes)."""
    run, out = Path(run_dir), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    frames = {name: pl.read_parquet(run / stage / file) for name, (stage, file) in FILES.items()}
    # the whole tree (~0.4 MB): readable labels are split with the vocabulary of all titles
    frames["ontology"] = pl.read_parquet(run / "ontology" / "nodes.parquet")
    ids = (set(frames["benchmark"]["query_id"]) | set(frames["benchmark"]["cand_id"])
           | set(frames["topics_sample"]["doc_id"]) | set(frames["summaries_sample"]["doc_id"]))
    corpus = pl.read_parquet(run / "corpus" / "corpus.parquet")
    frames["corpus"] = corpus.filter(pl.col("doc_id").is_in(sorted(ids))).select("doc_id", "problem", "solution")
    paths = []
    for name, df in frames.items():
        paths.append(out / f"{name}.parquet")
        df.write_parquet(paths[-1])
    return paths


def load_llm_inputs(inputs_dir) -> dict[str, pl.DataFrame]:
    d = Path(inputs_dir)
    return {name: pl.read_parquet(d / f"{name}.parquet") for name in [*FILES, "corpus", "ontology"]}


def stage_params(profile) -> dict:
    """What a notebook sees of a loaded profile (``config.Profile``): every flattened key, ``llm``
    as one dict."""
    flat = profile.flat([sec for sec in profile.values if sec != "llm"])
    return {**flat, "llm": profile.section("llm")}


def run_llm_stages(inputs: dict[str, pl.DataFrame], params: dict, backend, work_dir) -> dict:
    """The LLM steps of topics, summaries, tournament, math_vs_words and judge_validation on
    ``inputs`` (:func:`load_llm_inputs`) with ``backend``; ``params``: the profile's flattened keys with
    ``llm`` as a dict (as a notebook sees them). Returns the stages' outputs by name."""
    llm = params["llm"]
    clip = llm.get("text_max_words", 0)
    corpus = inputs["corpus"]
    out: dict = {}
    # topics: the LLM walk of the sample (02_topics), through the stage's own step
    onto = ontology_from_nodes(inputs["ontology"])
    sample = inputs["topics_sample"].select("doc_id").join(corpus, on="doc_id", how="left")
    scorer = LLMTopicScorer(backend, retries=params["topic_retries"], guided=bool(llm.get("guided_json", False)))
    out["topics"], _ = llm_walk(onto, sample, scorer, clip=clip, tau=params["tau"],
                                score_root=params["topic_score_root"], max_depth=params["topic_llm_max_depth"])
    # summaries (03_summaries), through the stage's own step
    sample = inputs["summaries_sample"].select("doc_id").join(corpus, on="doc_id", how="left")
    out["summaries"], _ = llm_summaries(backend, sample, clip=clip, max_words=params["core_idea_max_words"],
                                        retries=params["summary_retries"], guided=bool(llm.get("guided_json", False)))
    # tournament (07_tournament)
    bench = inputs["benchmark"]
    docs = corpus_docs(corpus, set(bench["query_id"]) | set(bench["cand_id"]), max_words=clip)
    judge = judge_from_profile(JudgeSettings.from_params(params), backend)
    res = run_tournament(bench, docs, judge, schedule=params["schedule"], rounds=params["rounds"],
                         seed=params["seed"], store_dir=Path(work_dir) / "rounds", alpha=params["bt_alpha"],
                         top=params["rating_top"], max_queries=params["tournament_max_queries"])
    out["judgments"], out["ratings"] = res.judgments, res.ratings
    # math vs words: the LLM formatting of the queries (11_math_vs_words)
    queries = mw.query_table(bench, corpus)
    normalized, failures = mw.llm_normalize(queries["text"].to_list(), backend, retries=params["mvw_format_retries"])
    out["mvw_split"] = mw.split_queries(queries, normalized).kept
    out["mvw_failures"] = failures
    # judge validation: the judges' labels on the sampled pairs (12_judge_validation)
    pairs = inputs["jv_pairs"]
    base = judge_from_profile(JudgeSettings.from_params(params), backend, position_swap=False)
    pair_judge = SwappedJudge(base, params["swap_disagreement"]) if params["position_swap"] else base
    methods, _ = ag.method_labels(pairs, docs, bench, inputs["ratings"], pair_judge=pair_judge, base_judge=base,
                                  majority_votes=params["jv_majority_votes"],
                                  ordinal_judge=OrdinalJudge(backend, retries=params["judge_retries"],
                                                              score_only=bool(llm.get("logprob_judge", False))),
                                  schedule=params["schedule"], schedules=params["jv_schedules"],
                                  rounds=params["rounds"], seed=params["seed"], store_dir=work_dir,
                                  alpha=params["bt_alpha"], top=params["rating_top"])
    out["jv_labels"] = methods
    return out
