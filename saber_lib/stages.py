"""The pipeline's stages: notebook, upstream stages, and the parameter sections each one takes.

Every stage also gets the ``run`` section. The order of ``STAGES`` is a valid execution order.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Stage:
    name: str
    notebook: str                # file in notebooks/
    deps: tuple[str, ...]        # stages whose artifacts it reads
    sections: tuple[str, ...]    # profile sections it takes (besides `run`)
    data_files: tuple[str, ...] = ()  # files under the data directory it reads (hashed as inputs)
    run_inputs: tuple[str, ...] = ()  # folders of the run directory it reads, outside any stage (hashed)


STAGES: tuple[Stage, ...] = (
    Stage("corpus", "00_corpus.ipynb", (), ("corpus",), (
        "sources/imo_proofbench/proofbench_v2.csv", "sources/harp_proof/HARP_proof-based.jsonl.zip",
        "sources/aime/aime.json", "sources/aime/aops_subject_labels.jsonl",
        "sources/olympiadbench/test.jsonl", "sources/omni_math_rule/omni_math_rule.jsonl",
        "sources/math/math.jsonl", "sources/proofnet/valid.jsonl", "sources/proofnet/test.jsonl",
        "sources/minif2f/informal.jsonl")),
    Stage("ontology", "01_ontology.ipynb", (), ("ontology",), ("ontology/mathworld_tree.json",)),
    Stage("topics", "02_topics.ipynb", ("corpus", "ontology"), ("topics", "llm")),
    Stage("summaries", "03_summaries.ipynb", ("corpus",), ("summaries", "llm")),
    Stage("signals", "04_signals.ipynb", ("corpus", "ontology", "topics", "summaries"), ("signals",)),
    Stage("thresholds", "05_thresholds.ipynb", ("signals", "topics"), ("thresholds",)),
    Stage("select", "06_select.ipynb", ("corpus", "topics", "signals", "thresholds"), ("select",)),
    Stage("tournament", "07_tournament.ipynb", ("corpus", "select"), ("tournament", "llm")),
    Stage("inversions", "07_inversions.ipynb", ("corpus", "select"), ("inversions", "tournament", "llm")),
    Stage("evaluate", "08_evaluate.ipynb", ("corpus", "topics", "select", "tournament"), ("evaluate",)),
    Stage("signal_ablation", "09_signal_ablation.ipynb", ("select", "tournament"), ("signal_ablation",)),
    Stage("math_vs_words", "10_math_vs_words.ipynb", ("corpus", "topics", "select", "tournament"),
          ("math_vs_words", "evaluate", "llm")),
    Stage("judge_validation", "11_judge_validation.ipynb", ("corpus", "select", "tournament"),
          ("judge_validation", "tournament", "llm"), run_inputs=("annotations",)),
    Stage("distributions", "12_distributions.ipynb", ("corpus", "ontology", "topics", "select", "tournament"),
          ("distributions",)),
)

BY_NAME = {s.name: s for s in STAGES}


def downstream_closure(names) -> list[str]:
    """The named stages and everything that (transitively) reads from them, in pipeline order."""
    want = set(names)
    for s in STAGES:
        if want & set(s.deps):
            want.add(s.name)
    return [s.name for s in STAGES if s.name in want]


def upstream_closure(names) -> list[str]:
    """The named stages and everything they (transitively) read from, in pipeline order."""
    want = set(names)
    for s in reversed(STAGES):
        if s.name in want:
            want.update(s.deps)
    return [s.name for s in STAGES if s.name in want]
