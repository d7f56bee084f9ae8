"""``saber judge-check``: pairwise judges scored against a file of reference labels.

``saber judge-check --params P --run-dir R --reference FILE --judge SPEC [--judge SPEC ...] --out DIR``
reads the reference triples (``validation.reference``: JSON Lines or CSV; a relative path is inside the
data directory), keeps those whose query and candidates are in R's corpus (the corpus as the profile and
``--set`` values give it: R's own when up to date, else computed in a working folder of the command,
never in R, which the command only reads; the signal judges also need the ontology, topics and
summaries stages, read the same way), lets every judge (a spec of
the judge registry, ``judging.registry``) answer them (a judge whose requests fail past
``llm.max_failure_rate``, or every one of them, stops the command as it stops a stage), and writes
into DIR (through the project's output-folder guard, ``core.outputs.check_output_dir`` /
``replace_output_dir``; a DIR that cannot be made is found before any judge runs):

* ``judge_check.parquet`` / ``judge_check.md``: ``judge, detail, n_pairs, agreement, ci_low,
  ci_high, ties, first_share, failures, seconds_per_pair`` (agreement in percent with the paper's
  scoring and a bootstrap interval over queries, ``judge_validation.jv_n_resamples`` /
  ``jv_ci_level``); the Markdown file adds the reference, skipped rows, the inter-annotator
  agreement and what ``seconds_per_pair`` measures (wall time of this call: answers already in a
  cache cost nothing, so it varies run to run);
* ``verdicts.parquet``: ``judge, query_id, a, b, verdict, margin, label`` (the triple's first
  label), ``labels`` (all of them), ``score``.

With ``--grades FILE`` (candidates graded 0-100; with or without ``--reference``) the judges also
answer the graded pairs (:mod:`.grade_check`): ``grade_check.parquet`` / ``grade_check.md`` (pairwise
accuracy, per-query Spearman for pointwise judges, intervals over queries) and
``grade_verdicts.parquet``. With ``--fidelity`` as well, each judge plays the run's tournament on
the fully graded queries and the run's evaluated retrievers are ordered under its ratings and under
the grades (the evaluate stage read the same way): ``fidelity_check.parquet`` / ``.md`` and
``fidelity_systems.parquet`` (:mod:`.grade_check`).
"""
from __future__ import annotations

import shutil
import time
from pathlib import Path

import polars as pl

from ..core import data, outputs
from ..judging.registry import JudgeContext, JudgeSettings, build_judge, judge_errors, parse_judge_spec
from ..judging.spec_judges import judge_answers
from ..judging.tournament import corpus_docs
from ..llm import llm_cache_path, make_backend
from ..llm.budget import check_failure_budget
from ..ontology.tree import ontology_from_nodes
from ..signals.pair_values import PairSignals
from . import grades as gr
from . import reference as ref
from ..report.tables import to_markdown
from . import grade_check

COMMAND = "saber judge-check"
SIGNAL_STAGES = ("ontology", "topics", "summaries")
TABLE_SCHEMA = {"judge": pl.String, "detail": pl.String, "n_pairs": pl.Int64, "agreement": pl.Float64,
                "ci_low": pl.Float64, "ci_high": pl.Float64, "ties": pl.Float64, "first_share": pl.Float64,
                "failures": pl.Int64, "seconds_per_pair": pl.Float64}


def judge_check(open_run, run_dir, reference, judge_specs, out, log=print, grades=None,
                pairs_per_query: int | None = None, min_gap: float | None = None, fidelity: bool = False) -> pl.DataFrame:
    """The command (module docstring); returns the agreement table on the reference triples, or the
    graded-pairs table when only ``grades`` is given. ``open_run(run_dir)`` gives the run's access
    object (``pipeline.run_access.RunAccess``: ``profile``, ``stage_params``, ``data_dir``,
    ``stage_dir``, ``close``), opened once the output folder is known to be writable and closed at
    the end: it never writes into the run (a stage its settings make stale is computed in a working
    folder of its own, removed by ``close``)."""
    if reference is None and grades is None:
        raise ref.ReferenceFileError("give --reference (labelled triples), --grades (graded candidates) or both")
    if fidelity and grades is None:
        raise ref.ReferenceFileError("--fidelity orders the run's retrievers under graded labels: give --grades")
    out, run_dir = outputs.output_target(out), data.folder_path(run_dir, "--run-dir").resolve()
    outputs.check_output_dir(out, COMMAND)
    shutil.rmtree(outputs.output_work_dir(out))   # a folder that cannot be written is found before any judge runs
    rctx = open_run(run_dir)
    try:   # the run is only read: what its settings make stale is computed in the access object's own folder
        profile = rctx.profile
        specs = [parse_judge_spec(s) for s in judge_specs]   # after the profile: its plugins may register kinds
        params = rctx.stage_params("judge_validation")
        jv = profile.values["judge_validation"]
        path = _labels_path(reference, rctx) if reference is not None else None
        rows = ref.read_reference(path) if path is not None else None
        grades_path = _labels_path(grades, rctx) if grades is not None else None
        grade_rows = gr.read_grades(grades_path) if grades_path is not None else None
        corpus = pl.read_parquet(rctx.stage_dir("corpus") / "corpus.parquet")
        ids_of = lambda src: ref.source_ids(rctx.data_dir(), src)    # noqa: E731
        trip = skipped = graded = None
        ids: set = set()
        if rows is not None:
            kept, skipped = ref.split_by_corpus(rows, corpus["doc_id"].to_list(), path, ids_of)
            trip = ref.triples(kept)
            if trip.height == 0:
                raise ref.ReferenceFileError(f"{path}: none of its {rows.height} rows has its query and both candidates "
                                             f"in the corpus of {run_dir}")
            ids |= set(trip["query_id"]) | set(trip["a"]) | set(trip["b"])
        if grade_rows is not None:
            graded = grade_check.graded_input(grade_rows, corpus, grades_path, ids_of, run_dir,
                                              min_gap=jv["jv_grade_min_gap"] if min_gap is None else min_gap,
                                              per_query=jv["jv_grade_pairs"] if pairs_per_query is None else pairs_per_query,
                                              seed=params["seed"])
            ids |= graded["ids"]
        llm = params["llm"]
        clip = llm.get("text_max_words", 0) if llm["backend"] != "none" else 0
        backend_box: list = []

        def backend():
            if not backend_box:
                backend_box.append(make_backend(llm, llm_cache_path(llm, run_dir, params["cache_dir"])))
            return backend_box[0]

        def signals():
            d = {s: rctx.stage_dir(s) for s in SIGNAL_STAGES}
            return PairSignals(corpus["doc_id"].to_list(), pl.read_parquet(d["topics"] / "topics.parquet"),
                               pl.read_parquet(d["summaries"] / "summaries.parquet"),
                               ontology_from_nodes(d["ontology"] / "nodes.parquet"),
                               profile.values["signals"]["jaccard_empty"])

        # whole texts; an LLM judge reads them clipped to llm.text_max_words, as the stages show it
        ctx = JudgeContext(JudgeSettings.from_params(params), make_backend=backend, signals=_once(signals), clip_words=clip)
        docs = corpus_docs(corpus, ids=ids)
        files: dict = {}
        table = None
        if trip is not None:
            table, verdict_table = _reference_tables(specs, ctx, docs, trip, jv, params["seed"], log)
            _within_budget(table, verdict_table, llm["max_failure_rate"], backend_box)
            inter = ref.inter_annotator_table(trip, n_resamples=jv["jv_n_resamples"], level=jv["jv_ci_level"],
                                              seed=params["seed"])
            files.update({"judge_check.parquet": table, "verdicts.parquet": verdict_table,
                          "judge_check.md": _markdown(table, inter, path, rows, skipped, trip, jv,
                                                      backend_box[0].describe() if backend_box else None)})
        if graded is not None:
            gtable, gverdicts = grade_check.grade_tables(specs, ctx, docs, graded, jv, params["seed"], log)
            _within_budget(gtable, gverdicts, llm["max_failure_rate"], backend_box)
            files.update({"grade_check.parquet": gtable, "grade_verdicts.parquet": gverdicts,
                          "grade_check.md": grade_check.markdown(gtable, graded, jv,
                                                                 backend_box[0].describe() if backend_box else None)})
            table = gtable if table is None else table
            if fidelity:
                bench = pl.read_parquet(rctx.stage_dir("select") / "benchmark.parquet")
                scores = pl.read_parquet(rctx.stage_dir("evaluate") / "scores.parquet")
                bench_docs = corpus_docs(corpus, ids=set(bench["query_id"]) | set(bench["cand_id"]))
                ftable, fsystems = grade_check.fidelity_tables(specs, ctx, {**bench_docs, **docs}, graded, bench, scores,
                                                               params, jv, log)
                files.update({"fidelity_check.parquet": ftable, "fidelity_systems.parquet": fsystems,
                              "fidelity_check.md": grade_check.fidelity_markdown(
                                  ftable, fsystems, graded, jv, backend_box[0].describe() if backend_box else None)})
        _write(out, files)
        return table
    finally:
        rctx.close()   # that folder removed (on an error, Ctrl-C or a SIGTERM the command turns into one too)


def _labels_path(value, rctx) -> Path:
    """A labels file as given (anything there: a folder or FIFO is then named as what it is), else
    relative to the data directory."""
    return Path(value) if Path(value).exists() else ref.reference_path(value, rctx.data_dir())


def _within_budget(table: pl.DataFrame, verdicts: pl.DataFrame, max_rate: float, backend_box: list) -> None:
    """As in the stages: a judge whose answers failed past ``llm.max_failure_rate`` (or every one of
    them) has no result; the command stops before anything is written."""
    errors = backend_box[0].first_errors() if backend_box else []
    for judge, failures in table.select("judge", "failures").iter_rows():
        n = verdicts.filter(pl.col("judge") == judge).height
        check_failure_budget(n, failures, errors, max_rate=max_rate, stage=f"judge-check, judge {judge}")


def _reference_tables(specs, ctx, docs, trip, jv, seed, log) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The agreement table and the verdicts of every judge on the reference triples."""
    items = list(trip.select("query_id", "a", "b").iter_rows())
    shown = [(docs[q], docs[a], docs[b]) for q, a, b in items]
    rows_out, verdicts = [], []
    for spec in specs:
        log(f"[judge] {spec.text} on {len(items)} triples")
        t0 = time.perf_counter()
        with judge_errors(spec):     # a plugin's judge out of its contract: one line naming it
            ans = judge_answers(build_judge(spec, ctx), shown)
        wall = time.perf_counter() - t0
        table = ref.reference_agreement_table({spec.text: ans.labels}, trip, n_resamples=jv["jv_n_resamples"],
                                    level=jv["jv_ci_level"], seed=seed)
        stats = ref.verdict_stats(ans.labels)
        agree = table.row(0, named=True)
        rows_out.append({"judge": spec.text, "detail": ans.detail,
                         **{k: agree[k] for k in ("n_pairs", "agreement", "ci_low", "ci_high")},
                         "ties": stats["ties"], "first_share": stats["first_share"], "failures": stats["failures"],
                         "seconds_per_pair": wall / len(items)})
        scores = ref.triple_scores(ans.labels, trip["labels"].to_list())
        verdicts.append(trip.select("query_id", "a", "b", "labels").with_columns(
            pl.lit(spec.text).alias("judge"), pl.Series("verdict", ans.labels, dtype=pl.String),
            pl.Series("margin", ans.margins if ans.margins is not None else [None] * len(items), dtype=pl.Float64),
            pl.col("labels").list.first().alias("label"), pl.Series("score", scores)))
    table = pl.DataFrame([{k: r[k] for k in TABLE_SCHEMA} for r in rows_out], schema=TABLE_SCHEMA)
    verdict_table = pl.concat(verdicts).select("judge", "query_id", "a", "b", "verdict", "margin", "label",
                                               "labels", "score")
    return table, verdict_table


def _once(make):
    box: list = []

    def get():
        if not box:
            box.append(make())
        return box[0]
    return get


def _markdown(table, inter, path, rows, skipped, trip, jv, llm_record) -> str:
    skipped_triples = skipped.select("query_id", "a", "b").unique().height
    caption = (f"Agreement (%) of each judge with the reference labels of {path} ({rows.height} rows; "
               f"{trip.height} triples of {trip['query_id'].n_unique()} queries whose three documents are in the "
               f"run's corpus; {skipped.height} rows ({skipped_triples} triples) skipped, a document not in the "
               f"corpus). Paper scoring: 1 for the same label, 0.5 when exactly one side is a tie; a triple "
               f"labelled more than once scores the mean over its labels. {jv['jv_ci_level']:.0%} percentile "
               f"bootstrap interval over queries ({jv['jv_n_resamples']} resamples). ties: share of answers "
               f"that were ties; first_share: share of decided answers for the candidate shown first; "
               f"seconds_per_pair: wall time of this call per triple (cached answers cost nothing; not "
               f"reproducible). " + grade_check.judges_line(table))
    parts = [to_markdown(table.drop("detail"), caption=caption, float_fmt="{:.3f}")]
    parts.append(to_markdown(inter, caption="Agreement (%) between the labels of triples labelled more than once "
                                            "(paper scoring; identical: share with all labels equal).",
                             float_fmt="{:.1f}"))
    parts += grade_check.llm_line(llm_record)
    return "\n\n".join(parts) + "\n"


def _write(out: Path, files: dict) -> None:
    """Writes the files (name -> a table or Markdown text) into a work folder, then replaces ``out``."""
    tmp = outputs.output_work_dir(out)
    try:
        for name, content in files.items():
            if isinstance(content, str):
                (tmp / name).write_text(content)
            else:
                content.write_parquet(tmp / name)
        outputs.replace_output_dir(tmp, out, COMMAND)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
