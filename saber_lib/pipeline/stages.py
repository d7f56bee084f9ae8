"""The pipeline's stages: notebook, upstream stages, and the parameter sections each one takes.

Every stage also gets the ``run`` section. The order of ``STAGES`` is a valid execution order.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..corpus.loaders import FILES


@dataclass(frozen=True)
class Stage:
    name: str
    notebook: str                # file in notebooks/
    deps: tuple[str, ...]        # stages whose artifacts it reads
    sections: tuple[str, ...]    # profile sections it takes (besides `run`)
    data_files: tuple[str, ...] = ()  # files under the data directory it reads (hashed as inputs)
    run_inputs: tuple[str, ...] = ()  # folders of the run directory it reads, outside any stage (hashed)
    # when the files it reads depend on the profile: profile values -> those files (replaces data_files)
    data_files_of: Callable[[dict], tuple[str, ...]] | None = None

    def data_files_for(self, values: dict) -> tuple[str, ...]:
        """The data files this stage reads under a profile's values (hashed as its inputs)."""
        return self.data_files_of(values) if self.data_files_of else self.data_files


def corpus_data_files(values: dict) -> tuple[str, ...]:
    """The corpus stage reads the files of the sources the profile enables (``corpus/loaders.FILES``)."""
    return tuple(f for src in values["corpus"]["sources"] for f in FILES.get(src, ()))


STAGES: tuple[Stage, ...] = (
    Stage("corpus", "00_corpus.ipynb", (), ("corpus",), data_files_of=corpus_data_files),
    Stage("ontology", "01_ontology.ipynb", (), ("ontology",), ("ontology/mathworld_tree.json",)),
    Stage("topics", "02_topics.ipynb", ("corpus", "ontology"), ("topics", "llm")),
    Stage("summaries", "03_summaries.ipynb", ("corpus",), ("summaries", "llm")),
    Stage("signals", "04_signals.ipynb", ("corpus", "ontology", "topics", "summaries"), ("signals",)),
    Stage("thresholds", "05_thresholds.ipynb", ("signals", "topics", "summaries"), ("thresholds",)),
    Stage("select", "06_select.ipynb", ("corpus", "topics", "summaries", "signals", "thresholds"), ("select",)),
    Stage("tournament", "07_tournament.ipynb", ("corpus", "select"), ("tournament", "llm")),
    Stage("inversions", "08_inversions.ipynb", ("corpus", "select"), ("inversions", "tournament", "llm")),
    Stage("evaluate", "09_evaluate.ipynb", ("corpus", "topics", "select", "tournament"), ("evaluate",)),
    Stage("signal_ablation", "10_signal_ablation.ipynb", ("select", "tournament"), ("signal_ablation",)),
    Stage("math_vs_words", "11_math_vs_words.ipynb", ("corpus", "topics", "select", "tournament"),
          ("math_vs_words", "evaluate", "llm")),
    Stage("judge_validation", "12_judge_validation.ipynb", ("corpus", "select", "tournament"),
          ("judge_validation", "tournament", "llm"), run_inputs=("annotations",)),
    Stage("distributions", "13_distributions.ipynb", ("corpus", "ontology", "topics", "select", "tournament"),
          ("distributions",)),
    Stage("robustness", "15_robustness.ipynb", ("corpus", "select", "tournament", "evaluate"),
          ("robustness", "evaluate", "tournament", "llm")),
)

BY_NAME = {s.name: s for s in STAGES}


def upstream_closure(names) -> list[str]:
    """The named stages and everything they (transitively) read from, in pipeline order."""
    want = set(names)
    for s in reversed(STAGES):
        if s.name in want:
            want.update(s.deps)
    return [s.name for s in STAGES if s.name in want]
