"""The pipeline's stages: notebook, upstream stages, and the parameter sections each one takes.

Every stage also gets the ``run`` section. A stage whose upstream stages follow the profile
(``deps_of``: evaluate reads the built benchmark or the released one) declares them per profile;
:func:`upstream_closure` orders stages so that each runs after what it reads under that profile
(ties in ``STAGES`` order, which is a valid execution order when no profile says otherwise).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..corpus.loaders import FILES
from ..core.data import PROJECT_ROOT, resolve_data_dir
from ..retrieval.registry import file_argument


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
    # its loops run on the profile's executor: it also gets run.executor, dask_scheduler, dask_workers
    # (not in its parameter hash: every executor gives the same artifacts)
    parallel: bool = False
    # when the stages it reads depend on the profile: profile values -> those stages (replaces deps)
    deps_of: Callable[[dict], tuple[str, ...]] | None = None
    # stages outside ``deps`` that ``deps_of`` returns under some profile (declared inputs too)
    may_read: tuple[str, ...] = ()

    def deps_for(self, values: dict | None) -> tuple[str, ...]:
        """The stages this stage reads from under a profile's values (``deps`` without a profile)."""
        return self.deps_of(values) if self.deps_of and values is not None else self.deps

    def declared_inputs(self) -> tuple[str, ...]:
        """Every stage whose artifacts this stage may read (``StageContext.input`` refuses others)."""
        return self.deps + tuple(s for s in self.may_read if s not in self.deps)
    # files outside the data directory and the run directory it reads (TREC runs, ...): profile values
    # -> absolute paths, hashed as its inputs
    external_files_of: Callable[[dict], tuple[str, ...]] | None = None
    # its notebook resumes from its own folder (stored judgments): artifacts of another setting are
    # moved aside to <run dir>/_superseded/ before it reruns (other stages' folders are emptied)
    resumable: bool = False
    # stages that finish before it starts when both run in one `saber run` (not inputs, not in its
    # staleness): they embed or judge the same texts with the same model, so it finds their vectors in the
    # embedding store instead of computing them a second time beside them
    after: tuple[str, ...] = ()

    def data_files_for(self, values: dict) -> tuple[str, ...]:
        """The data files this stage reads under a profile's values (hashed as its inputs)."""
        return self.data_files_of(values) if self.data_files_of else self.data_files

    def external_files_for(self, values: dict) -> tuple[str, ...]:
        """The external files this stage reads under a profile's values (hashed as its inputs)."""
        return self.external_files_of(values) if self.external_files_of else ()


def corpus_data_files(values: dict) -> tuple[str, ...]:
    """The corpus stage reads the files of the sources the profile enables (``corpus/loaders.FILES``)."""
    return tuple(f for src in values["corpus"]["sources"] for f in FILES.get(src, ()))


RELEASED_SETS = ("queries", "documents")
RELEASED_FORMATS = ("parquet", "jsonl")


def released_data_files(values: dict) -> tuple[str, ...]:
    """The released stage reads ``benchmark_dir``'s queries and documents sets (each a ``.parquet``
    or ``.jsonl`` file, or a ``save_to_disk`` folder); a missing set is named by its parquet file,
    so the runner reports it missing before anything runs."""
    rel = values["released"]["benchmark_dir"]
    if rel is None:
        return ()
    root = resolve_data_dir(values["run"]["data_dir"]) / rel
    out: list[str] = []
    for name in RELEASED_SETS:
        files = [root / f"{name}.{ext}" for ext in RELEASED_FORMATS if (root / f"{name}.{ext}").is_file()]
        if not files and (root / name).is_dir():
            files = sorted(p for p in (root / name).rglob("*") if p.is_file())
        out += [str(p) for p in files] or [str(root / f"{name}.parquet")]
    return tuple(out)


def evaluate_deps(values: dict) -> tuple[str, ...]:
    """evaluate reads this run's built benchmark, or the released one (``evaluate.benchmark``)."""
    if values["evaluate"]["benchmark"] == "released":
        return ("released",)
    return ("corpus", "topics", "select", "tournament")


def leaderboard_deps(values: dict) -> tuple[str, ...]:
    """The leaderboard ranks this run's retrievers only when they were evaluated on the release."""
    return ("evaluate",) if values["evaluate"]["benchmark"] == "released" else ()


def judge_validation_deps(values: dict) -> tuple[str, ...]:
    """Judge validation reads the evaluate stage's scores only to compare system rankings under the
    ratings and under graded labels (``judge_validation.jv_grades``)."""
    base = ("corpus", "select", "tournament")
    return base + ("evaluate",) if values["judge_validation"].get("jv_grades") else base


def run_files(values: dict) -> tuple[str, ...]:
    """The TREC run files of ``evaluate.retrievers`` (``run:PATH``; absolute once the profile is loaded)."""
    return tuple(f for f in map(file_argument, values["evaluate"]["retrievers"]) if f is not None)


PUBLISHED_SUBDIRS = ("evaluation", "confidence")
# the cross-system readings' inputs (saber_lib.leaderboard.crosssystem), where the folder holds them
PUBLISHED_CROSS_SYSTEM = ("mteb/leaderboard.csv", "dedup_summaries.jsonl")
SYSTEMS_TABLE = "saber_lib/leaderboard/systems.csv"   # the committed MTEB name table


def published_files(values: dict) -> tuple[str, ...]:
    """The authors' result files the leaderboard stage reads (``leaderboard.published_dir``, relative
    to the project root, or the data directory's ``published/``): every ``evaluation/*.json`` and
    ``confidence/*.json``, the MTEB snapshot and the rephrased-rank summaries, and the committed
    systems table, so an edited, added or removed file makes the stage stale."""
    rel = values["leaderboard"]["published_dir"]
    root = (PROJECT_ROOT / rel if rel else resolve_data_dir(values["run"]["data_dir"]) / "published").resolve()
    return (tuple(str(p) for sub in PUBLISHED_SUBDIRS if (root / sub).is_dir()
                  for p in sorted((root / sub).glob("*.json")))
            + tuple(str(root / f) for f in PUBLISHED_CROSS_SYSTEM if (root / f).is_file())
            + ((str(PROJECT_ROOT / SYSTEMS_TABLE),) if (PROJECT_ROOT / SYSTEMS_TABLE).is_file() else ()))


STAGES: tuple[Stage, ...] = (
    Stage("corpus", "00_corpus.ipynb", (), ("corpus",), data_files_of=corpus_data_files, parallel=True),
    # its file is ontology.ontology_file, a path-valued key: hashed as an input (pipeline/path_inputs)
    Stage("ontology", "01_ontology.ipynb", (), ("ontology",)),
    Stage("topics", "02_topics.ipynb", ("corpus", "ontology"), ("topics", "llm")),
    Stage("summaries", "03_summaries.ipynb", ("corpus",), ("summaries", "llm")),
    Stage("signals", "04_signals.ipynb", ("corpus", "ontology", "topics", "summaries"), ("signals",),
          parallel=True),
    Stage("thresholds", "05_thresholds.ipynb", ("signals", "topics", "summaries"), ("thresholds",)),
    Stage("select", "06_select.ipynb", ("corpus", "topics", "summaries", "signals", "thresholds"), ("select",)),
    Stage("tournament", "07_tournament.ipynb", ("corpus", "select"), ("tournament", "llm"), resumable=True),
    Stage("inversions", "08_inversions.ipynb", ("corpus", "select"), ("inversions", "tournament", "llm"),
          resumable=True, after=("tournament",)),
    Stage("evaluate", "09_evaluate.ipynb", ("corpus", "topics", "select", "tournament"), ("evaluate",),
          deps_of=evaluate_deps, may_read=("released",), external_files_of=run_files),
    Stage("signal_ablation", "10_signal_ablation.ipynb", ("select", "tournament"), ("signal_ablation",)),
    Stage("math_vs_words", "11_math_vs_words.ipynb", ("corpus", "topics", "select", "tournament"),
          ("math_vs_words", "evaluate", "llm"), after=("evaluate",)),
    Stage("judge_validation", "12_judge_validation.ipynb", ("corpus", "select", "tournament"),
          ("judge_validation", "tournament", "evaluate", "llm"), run_inputs=("annotations",), resumable=True,
          deps_of=judge_validation_deps, may_read=("evaluate",)),
    # its file of reference labels is judge_validation.jv_reference, a path-valued key: an input
    Stage("distributions", "13_distributions.ipynb", ("corpus", "ontology", "topics", "select", "tournament"),
          ("distributions",)),
    Stage("leaderboard", "14_leaderboard.ipynb", (), ("leaderboard",), deps_of=leaderboard_deps,
          may_read=("evaluate",), external_files_of=published_files),
    Stage("robustness", "15_robustness.ipynb", ("corpus", "select", "tournament", "evaluate"),
          ("robustness", "evaluate", "tournament", "llm")),
    # an entry stage like corpus: it runs before evaluate whenever evaluate reads it (upstream_closure)
    Stage("released", "16_released.ipynb", (), ("released",), data_files_of=released_data_files),
    Stage("open_corpus", "17_open_corpus.ipynb", ("corpus", "summaries", "select", "tournament"),
          ("open_corpus", "evaluate", "tournament", "llm"), resumable=True),
)

BY_NAME = {s.name: s for s in STAGES}


def upstream_closure(names, values: dict | None = None) -> list[str]:
    """The named stages and everything they (transitively) read from under the profile's
    ``values`` (the static ``deps`` without one), each after what it reads, ties in ``STAGES`` order."""
    by_name = {s.name: s for s in STAGES}
    want, todo = set(), list(names)
    while todo:
        n = todo.pop()
        if n not in want:
            want.add(n)
            todo.extend(by_name[n].deps_for(values))
    order: list[str] = []
    while len(order) < len(want):
        ready = [s.name for s in STAGES if s.name in want and s.name not in order
                 and all(d in order for d in s.deps_for(values))]
        if not ready:
            raise RuntimeError(f"stages {sorted(want - set(order))} read from each other in a cycle")
        order.append(ready[0])
    return order
