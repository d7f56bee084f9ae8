"""``saber judge-check --grades FILE``: judges scored on graded candidate pairs.

The grades file (:mod:`saber_lib.validation.grades`) grades candidates of queries 0-100. Its rows whose
query and candidate are in the run's corpus are averaged per pair; the pairs of one query whose
grades differ by at least ``--min-gap`` points (``judge_validation.jv_grade_min_gap``, 10) are the
graded pairs, all of them or ``--pairs-per-query N`` drawn per query (seeded; ``jv_grade_pairs``), each
shown in a seeded random order. Every judge answers them as it answers reference triples; the table
(``grade_check.parquet`` / ``.md``) gives its pairwise accuracy (a tie counts as not ordered) with a
bootstrap interval over queries and, for a judge that scores one candidate at a time (a proxy's
cosine, a selection signal, the ordinal judge's 0-100 scores; looked through a position swap, a
clip or the profile's wrapper), the mean per-query Spearman correlation of its scores with the
grades; ``grade_verdicts.parquet`` holds every verdict.

With ``--fidelity`` every judge also plays the run's tournament (``tournament.schedule``,
``rounds``, ``bt_alpha``, ``rating_top``, the run's seed) on the benchmark queries whose every
candidate is graded, and the run's evaluated retrievers (its ``evaluate/scores.parquet``) are
ordered under those ratings and under the grades (:mod:`saber_lib.validation.fidelity`): the system
order the benchmark would give with that judge, beside the ceiling (the grades as the judge).
``fidelity_check.parquet`` / ``.md``: per judge the Kendall tau-b with its interval over queries and
the retrievers its ratings favour or disfavour; ``fidelity_systems.parquet``: per judge and
retriever both nDCGs and its rank shift with its interval.
"""
from __future__ import annotations

import contextlib
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

from ..judging.registry import build_judge, judge_errors
from ..judging.spec_judges import judge_answers
from ..report.tables import to_markdown
from . import grades as gr
from . import reference as ref
from . import fidelity
from .grades_stage import grade_judge, judged_fidelity, pointwise_scores

TABLE_SCHEMA = {"judge": pl.String, "detail": pl.String, **{k: v for k, v in gr.AGREEMENT_SCHEMA.items() if k != "method"},
                "ties": pl.Float64, "first_share": pl.Float64, "failures": pl.Int64, "seconds_per_pair": pl.Float64}


def graded_input(rows: pl.DataFrame, corpus: pl.DataFrame, path, ids_of, run_dir, *, min_gap: float, per_query: int,
                 seed: int) -> dict:
    """The grades in the run's corpus and their pairs: ``grades``, ``pairs``, ``queries``, ``ids``
    (every document the judges read), ``rows``, ``skipped`` and ``inter`` (inter-annotator table)."""
    kept, skipped = ref.split_by_corpus(rows, corpus["doc_id"].to_list(), path, ids_of, fields=("query_id", "doc_id"))
    grades = gr.mean_grades(kept)
    queries = sorted(q for q, n in grades.group_by("query_id").len().iter_rows() if n >= 2)
    pairs = gr.graded_pairs(grades, queries, min_gap=min_gap, per_query=per_query, seed=seed)
    if pairs.height == 0:
        raise gr.GradesFileError(f"{path}: no two candidates of one query in the corpus of {run_dir} have grades at "
                                 f"least {min_gap:g} points apart ({kept.height} of {rows.height} rows in the corpus)")
    ids = set(grades["query_id"]) | set(grades["doc_id"])
    return {"grades": grades, "pairs": pairs, "queries": queries, "ids": ids, "rows": rows, "skipped": skipped,
            "inter": gr.annotator_spearman(kept), "path": path, "min_gap": min_gap, "per_query": per_query}


def grade_tables(specs, judge_ctx, docs: dict, graded: dict, jv: dict, seed: int, log) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The graded-pairs table (:data:`TABLE_SCHEMA`) and every judge's verdicts on the pairs (each
    judge built from its spec through the judge registry, ``judge_ctx``; ``docs``: id -> Doc)."""
    pairs = graded["pairs"]
    items = list(pairs.select("query_id", "a", "b").iter_rows())
    shown = [(docs[q], docs[a], docs[b]) for q, a, b in items]
    keys = list(graded["grades"].select("query_id", "doc_id").iter_rows())
    rows, verdicts = [], []
    for spec in specs:
        log(f"[judge] {spec.text} on {len(items)} graded pairs")
        t0 = time.perf_counter()
        with judge_errors(spec):     # a plugin's judge out of its contract: one line naming it
            judge = build_judge(spec, judge_ctx)
            ans = judge_answers(judge, shown)
            wall = time.perf_counter() - t0
            point = pointwise_scores(judge, keys, docs)
        t = gr.grade_agreement_table({spec.text: ans.labels}, {spec.text: point} if point else {}, pairs,
                                     graded["grades"], graded["queries"], n_resamples=jv["jv_n_resamples"],
                                     level=jv["jv_ci_level"], seed=seed).row(0, named=True)
        stats = ref.verdict_stats(ans.labels)
        rows.append({"judge": spec.text, "detail": ans.detail, **{k: t[k] for k in gr.AGREEMENT_SCHEMA if k != "method"},
                     "ties": stats["ties"], "first_share": stats["first_share"], "failures": stats["failures"],
                     "seconds_per_pair": wall / len(items)})
        verdicts.append(pairs.with_columns(
            pl.lit(spec.text).alias("judge"), pl.Series("verdict", ans.labels, dtype=pl.String),
            pl.Series("margin", ans.margins if ans.margins is not None else [None] * len(items), dtype=pl.Float64),
            pl.Series("right", [v == lab for v, lab in zip(ans.labels, pairs["label"])], dtype=pl.Boolean)))
    table = pl.DataFrame(rows, schema=TABLE_SCHEMA)
    return table, pl.concat(verdicts).select("judge", *pairs.columns, "verdict", "margin", "right")


CEILING = "the grades themselves (ceiling)"
FIDELITY_SCHEMA = {"judge": pl.String, "detail": pl.String, "n_queries": pl.Int64, "n_systems": pl.Int64, "kendall_tau": pl.Float64,
                   "ci_low": pl.Float64, "ci_high": pl.Float64, "spearman": pl.Float64, "favoured": pl.String,
                   "disfavoured": pl.String, "seconds": pl.Float64}


def fidelity_tables(specs, judge_ctx, docs: dict, graded: dict, bench: pl.DataFrame, scores: pl.DataFrame,
                    params: dict, jv: dict, log) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per judge (each spec, then the ceiling) the system-ranking fidelity of the ratings it gives
    through the run's tournament (:data:`FIDELITY_SCHEMA`), and every retriever's row under it
    (``judge`` + :data:`saber_lib.validation.fidelity.TABLE_SCHEMA`); module docstring."""
    covered, partial = gr.covered_queries(graded["grades"], bench)
    if not covered:
        raise gr.GradesFileError(f"{graded['path']}: no benchmark query of the run has every candidate graded "
                                 f"({len(partial)} partly graded): no system order to compare")
    judges = [(spec.text, lambda spec=spec: build_judge(spec, judge_ctx)) for spec in specs]
    judges.append((CEILING, lambda: grade_judge(graded["grades"])))
    rows, systems = [], []
    with tempfile.TemporaryDirectory(prefix="saber-fidelity-") as tmp:
        for i, (name, make) in enumerate(judges):
            log(f"[fidelity] {name}: the tournament on {len(covered)} graded queries")
            t0 = time.perf_counter()
            with judge_errors(specs[i]) if i < len(specs) else contextlib.nullcontext():   # a plugin's: one line
                judge = make()
                summary, table = judged_fidelity(
                    judge, bench, docs, graded["grades"], covered, scores, schedule=params["schedule"],
                    rounds=params["rounds"], seed=params["seed"], store_dir=Path(tmp) / f"judge{i}",
                    alpha=params["bt_alpha"], top=params["rating_top"], k=params["ndcg_k"],
                    tie_policy=params["tie_policy"], n_resamples=jv["jv_n_resamples"], level=jv["jv_ci_level"])
            rows.append({**{k: summary[k] for k in ("n_queries", "n_systems", "kendall_tau", "ci_low", "ci_high", "spearman")},
                         "judge": name, "detail": judge.name, "favoured": ", ".join(summary["favoured"]),
                         "disfavoured": ", ".join(summary["disfavoured"]), "seconds": time.perf_counter() - t0})
            systems.append(table.select(pl.lit(name).alias("judge"), *table.columns))
    return pl.DataFrame(rows, schema=FIDELITY_SCHEMA), pl.concat(systems)


def fidelity_markdown(table: pl.DataFrame, systems: pl.DataFrame, graded: dict, jv: dict,
                      llm_record: dict | None = None) -> str:
    """The Markdown report of :func:`fidelity_tables`: the summary, then each retriever's rank shift per judge."""
    main = systems.filter(pl.col("setting") == fidelity.MAIN_SETTING)
    n_q = int(table["n_queries"].max()) if table.height else 0
    caption = (f"System-ranking fidelity of each judge on the {n_q} benchmark queries whose every candidate "
               f"{graded['path']} grades: the judge plays the run's tournament on them, and every retriever the run "
               f"evaluated is scored (nDCG, {fidelity.MAIN_SETTING}) under those ratings and under the grades "
               f"(grade x rating_top / 100). kendall_tau: tau-b of the two system orders, with its "
               f"{jv['jv_ci_level']:.0%} interval over resampled queries ({jv['jv_n_resamples']} resamples); "
               f"favoured / disfavoured: retrievers whose rank-shift interval lies above / below 0; the last row plays the "
               f"grades themselves as the judge, the most the method's rating scale allows. seconds: wall time of this "
               f"call (cached answers cost nothing). " + judges_line(table))
    parts = [to_markdown(table.drop("detail"), caption=caption, float_fmt="{:.3f}")]
    if main.height:
        wide = (main.select("judge", "retriever", "rank_shift").pivot(on="judge", index="retriever", values="rank_shift")
                .join(main.filter(pl.col("judge") == CEILING).select("retriever", "ndcg_reference"), on="retriever")
                .sort("ndcg_reference", descending=True))
        parts.append(to_markdown(wide, caption=(
            "Each retriever's rank shift under each judge: on each query the retrievers are ranked by nDCG under the "
            "judge's ratings and under the grades; the shift is its rank under the grades minus under the ratings, mean "
            "over queries (> 0: the judge places it higher than the grades do); ndcg_reference: its nDCG under the "
            "grades; best under the grades first."), float_fmt="{:+.2f}"))
    parts += llm_line(llm_record)
    return "\n\n".join(parts) + "\n"


def judges_line(table: pl.DataFrame) -> str:
    """``Judges: <spec> = <what answered>; ...`` of a report table with ``judge`` and ``detail``."""
    return "Judges: " + "; ".join(f"{j} = {d}" for j, d in table.select("judge", "detail").iter_rows())


def llm_line(record: dict | None) -> list[str]:
    """The LLM backend that answered (model and usage), as the reports end with it; none without one."""
    if record is None:
        return []
    return [f"LLM backend: {record['llm_backend']} ({record['llm_model']}); usage: {record['llm_usage']}"]


def markdown(table: pl.DataFrame, graded: dict, jv: dict, llm_record: dict | None = None) -> str:
    """The Markdown report of the graded-pairs table."""
    rows, skipped, pairs = graded["rows"], graded["skipped"], graded["pairs"]
    caption = (f"Each judge on the graded pairs of {graded['path']} ({rows.height} rows; {skipped.height} skipped, a "
               f"document not in the run's corpus; {len(graded['queries'])} queries; {pairs.height} candidate pairs "
               f"whose grades differ by at least {graded['min_gap']:g} points"
               + (f", at most {graded['per_query']} per query, seeded" if graded["per_query"] else "") +
               f"). pairwise_accuracy: percent ordered as the grades order them (a tie counts as not ordered; failures "
               f"left out); spearman: mean over queries of the Spearman correlation of a pointwise judge's scores with "
               f"the grades. {jv['jv_ci_level']:.0%} percentile bootstrap intervals over queries "
               f"({jv['jv_n_resamples']} resamples). seconds_per_pair: wall time of this call (cached answers cost "
               f"nothing). " + judges_line(table))
    parts = [to_markdown(table.drop("detail"), caption=caption, float_fmt="{:.3f}")]
    inter = graded["inter"]
    if inter.height:
        rho = inter["spearman"].drop_nulls()
        parts.append(to_markdown(inter, caption=(
            f"Spearman correlation between annotators of the queries graded more than once (mean "
            f"{float(np.mean(rho.to_numpy())):.3f})" if rho.len() else "Queries graded more than once"),
            float_fmt="{:.3f}"))
    parts += llm_line(llm_record)
    return "\n\n".join(parts) + "\n"
