"""The judge-validation stage's graded-labels section (``judge_validation.jv_grades``).

On the benchmark queries whose every candidate the grades file grades (:mod:`.grades`; rows naming
documents outside the run's corpus are skipped and counted, an id in no corpus source stops the
stage naming the file and line), two questions:

* Do the methods order candidates as the grades do? Every method the stage already compares
  (:func:`saber_lib.validation.agreement.method_labels`: the pairwise judge, the majority and ordinal
  judges where they run, the benchmark's ranking and the other schedules' rankings, plus the second
  judge) answers the graded pairs (pairs at least ``jv_grade_min_gap`` points apart, all of them or
  ``jv_grade_pairs`` per query); the benchmark's ratings, a proxy judge's cosines and the ordinal
  judge's scores also give a per-query Spearman correlation with the grades
  (``grade_agreement.parquet``).
* Does the benchmark order the retrievers as the grades do? Every evaluated retriever's nDCG under
  the run's ratings and under the grades (:mod:`.fidelity`; ``system_fidelity.parquet`` and
  ``system_fidelity.json``). What limits that order's agreement (:mod:`.stability`): the grades' own
  split-half tau at as many queries (``noise_floor.json``: the judge or the number of queries?) and
  the rating design's ceiling over rounds and relevance mappings (``ceiling_design.parquet``).
"""
from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from ..judging.judge_base import checked_candidate_scores
from ..judging.judges import OrdinalJudge
from ..judging.tournament import run_tournament
from ..judging.registry import JudgeContext, build_judge
from . import agreement as ag
from . import fidelity
from . import grades as gr
from . import reference as ref
from .reference_stage import reference_docs
from . import stability as vstability

BENCHMARK_RANKING = "ratings"


def _inner(judge):
    """The judge that scores, looked through wrappers (position swap, clipping, the profile's spec)."""
    while hasattr(judge, "inner"):
        judge = judge.inner
    return judge


def pointwise_scores(judge, keys, docs: dict) -> dict | None:
    """``{(query_id, cand_id): score}`` of a judge that scores one candidate at a time (looked through
    its wrappers): the ordinal judge's 0-100 scores among those it already gave (no new call), or
    what a judge's ``candidate_scores`` gives (a proxy's cosine with the query, a selection signal, a
    plugin judge that defines it); None for the others."""
    inner = _inner(judge)
    keys = list(keys)
    if isinstance(inner, OrdinalJudge):
        wanted = set(keys)
        return {k: float(v) for k, v in inner.scores.items()
                if k in wanted and isinstance(v, (int, float)) and not isinstance(v, bool)}
    if getattr(inner, "candidate_scores", None) is None:
        return None
    return dict(zip(keys, checked_candidate_scores(inner, [(docs[q], docs[c]) for q, c in keys])))


def grades_path(value, data_dir=None) -> Path | None:
    """The grades file a profile names (``judge_validation.jv_grades``): None or empty = none; a
    relative path is inside the data directory."""
    return ref.reference_path(value, data_dir)


def read_covered(path: Path, corpus: pl.DataFrame, bench: pl.DataFrame, data_dir) -> dict:
    """The grades file read and split: ``rows`` (all), ``kept`` / ``skipped`` rows (a document
    outside the run's corpus), ``grades`` (mean per pair), ``covered`` / ``partial`` queries."""
    rows = gr.read_grades(path)
    kept, skipped = ref.split_by_corpus(rows, corpus["doc_id"].to_list(), path,
                                        lambda src: ref.source_ids(data_dir, src), fields=("query_id", "doc_id"))
    grades = gr.mean_grades(kept)
    covered, partial = gr.covered_queries(grades, bench)
    return {"rows": rows, "kept": kept, "skipped": skipped, "grades": grades, "covered": covered, "partial": partial}


def grades_section(path: Path, corpus: pl.DataFrame, bench: pl.DataFrame, ratings: pl.DataFrame,
                   scores: pl.DataFrame | None, *, data_dir, pair_judge, base_judge, second_judge: str, judge_ctx: JudgeContext,
                   majority_votes: int, ordinal_judge, schedule: str, schedules, rounds: int, seed: int, store_dir,
                   alpha: float, top: float, llm: dict, min_gap: float, per_query: int, n_resamples: int,
                   level: float, k: int, tie_policy: str, backends: str) -> dict:
    """Tables, captions, the fidelity summary and manifest facts (module docstring). ``scores``:
    the evaluate stage's ``scores.parquet`` (None: no fidelity)."""
    got = read_covered(path, corpus, bench, data_dir)
    grades, covered = got["grades"], got["covered"]
    record = {"file": str(path), "rows": got["rows"].height, "skipped_rows": got["skipped"].height,
              "graded_pairs_in_corpus": grades.height, "queries_covered": len(covered),
              "queries_partly_graded": got["partial"], "min_gap": min_gap, "pairs_per_query": per_query}
    inter = gr.annotator_spearman(got["kept"])
    record["inter_annotator_spearman"] = (float(inter["spearman"].drop_nulls().mean())
                                          if inter["spearman"].drop_nulls().len() else None)
    out = {"tables": {}, "captions": {}, "record": record, "fidelity": None, "inter": inter}
    if not covered:
        record["note"] = "no benchmark query has every candidate graded: nothing scored"
        return out
    pairs = gr.graded_pairs(grades, covered, min_gap=min_gap, per_query=per_query, seed=seed)
    if pairs.height == 0:
        raise gr.GradesFileError(f"{path}: no pair to score: no two candidates of the {len(covered)} fully graded "
                                 f"queries have grades at least judge_validation.jv_grade_min_gap = {min_gap:g} "
                                 f"points apart (a smaller gap, or grades that tell the candidates apart)")
    record["pairs"] = pairs.height
    max_words = llm.get("text_max_words", 0) if llm["backend"] != "none" else 0
    docs = reference_docs(corpus, bench, pairs, max_words)
    methods, notes = ag.method_labels(pairs, docs, bench, ratings, pair_judge=pair_judge, base_judge=base_judge,
                                      majority_votes=majority_votes, ordinal_judge=ordinal_judge, schedule=schedule,
                                      schedules=schedules, rounds=rounds, seed=seed, store_dir=Path(store_dir),
                                      alpha=alpha, top=top)
    second = build_judge(second_judge, judge_ctx)
    first_name = next(iter(methods))
    methods = {first_name: methods[first_name], f"second judge ({second.name})": ag.judge_labels(second, pairs, docs),
               **{m: v for m, v in methods.items() if m != first_name}}
    bench_name = f"{schedule} ranking (the benchmark's)"
    rated = ratings.filter(pl.col("query_id").is_in(covered))
    pointwise = {bench_name: {(q, c): float(r) for q, c, r in rated.select("query_id", "cand_id", "rating").iter_rows()}}
    keys = list(bench.filter(pl.col("query_id").is_in(covered)).select("query_id", "cand_id").iter_rows())
    named = [(first_name, pair_judge), (f"second judge ({second.name})", second)]
    if ordinal_judge is not None:
        named.append((f"ordinal judge ({ordinal_judge.name})", ordinal_judge))
    for name, judge in named:
        s = pointwise_scores(judge, keys, docs)
        if s:
            pointwise[name] = s
    table = gr.grade_agreement_table(methods, pointwise, pairs, grades, covered, n_resamples=n_resamples,
                                     level=level, seed=seed)
    out["tables"]["grade_agreement"] = table
    where = (f"graded labels {path.name} ({len(covered)} queries with every candidate graded; {pairs.height} "
             f"candidate pairs at least {min_gap:g} points apart"
             + (f", at most {per_query} per query" if per_query else "") + ")")
    out["captions"]["grade_agreement"] = (
        f"Agreement with the {where}: pairwise accuracy (%) = pairs ordered as the grades order them (a tie "
        f"counts as not ordered); spearman = mean over queries of the rank correlation of a pointwise method's "
        f"scores with the grades; {level:.0%} bootstrap intervals over queries ({n_resamples} resamples); {backends}")
    record["notes"] = notes
    record["grade_agreement"] = {r["method"]: {"pairwise_accuracy": r["pairwise_accuracy"], "spearman": r["spearman"]}
                                 for r in table.iter_rows(named=True)}
    if scores is not None and scores.height:
        per_q = fidelity.ndcg_both_ways(scores, ratings, grades, covered, top=top, k=k, tie_policy=tie_policy)
        if per_q.height:
            summary, ftable = fidelity.fidelity_summary(per_q, n_resamples=n_resamples, level=level, seed=seed)
            summary.update(k=k, scale=f"grade * {top:g} / 100", file=str(path))
            ceiling = _ceiling(bench, docs, grades, covered, scores, schedule=schedule, rounds=rounds, seed=seed,
                               store_dir=Path(store_dir) / "ceiling", alpha=alpha, top=top, k=k, tie_policy=tie_policy,
                               n_resamples=n_resamples, level=level)
            summary.update({f"ceiling_{key}": ceiling[key] for key in ("kendall_tau", "ci_low", "ci_high")})
            out["tables"]["system_fidelity"] = ftable
            out["captions"]["system_fidelity"] = (
                f"nDCG@{k} of every evaluated retriever on the {len(covered)} queries the {path.name} grades cover, "
                f"under the run's ratings and under the grades on the ratings' scale (grade x {top:g} / 100), "
                f"the benchmark's nDCG (gain 2^r - 1, tie policy {tie_policy}); Kendall tau-b of the two "
                f"{fidelity.MAIN_SETTING} orders {_fmt(summary)} (a judge ordering every pair as the grades do reaches "
                f"{_fmt(summary, 'ceiling_')} "
                f"through the same tournament and rescaling); rank_shift: a retriever's rank among the retrievers on a "
                f"query (by nDCG) under the grades minus under the ratings, mean and {level:.0%} interval over queries "
                f"(> 0: the ratings place it higher; queries_up / queries_down count the queries); {_favoured(summary)}; "
                f"{backends}")
            out["fidelity"] = summary
            out.update(per_query=per_q, docs=docs, grades=grades, covered=covered)   # for the fidelity's limits
            record["system_fidelity"] = summary
        else:
            record["note"] = ("the evaluate stage scored none of the graded queries (evaluate.benchmark: "
                              "released?): no system fidelity")
    return out


def judged_fidelity(judge, bench, docs, grades, covered, scores, *, schedule, rounds, seed, store_dir, alpha, top, k,
                    tie_policy, n_resamples, level) -> tuple[dict, pl.DataFrame]:
    """The fidelity summary and table (:mod:`.fidelity`) of ratings that ``judge`` gives the
    ``covered`` queries through the benchmark's tournament (schedule, rounds, seed, Bradley-Terry
    penalty and rescaling as given): what the run's system order would be with that judge. A query's
    rounds depend only on its own seed, so the run's own judge reproduces the run's ratings."""
    sub = bench.filter(pl.col("query_id").is_in(covered))
    res = run_tournament(sub, docs, judge, schedule=schedule, rounds=rounds, seed=seed, store_dir=store_dir,
                         alpha=alpha, top=top)
    per_q = fidelity.ndcg_both_ways(scores, res.ratings, grades, covered, top=top, k=k, tie_policy=tie_policy)
    return fidelity.fidelity_summary(per_q, n_resamples=n_resamples, level=level, seed=seed)


def grade_judge(grades: pl.DataFrame) -> fidelity.GradeJudge:
    """The grades as a pairwise judge (the ceiling)."""
    return fidelity.GradeJudge({(q, d): g for q, d, g in grades.select("query_id", "doc_id", "grade").iter_rows()})


def _ceiling(bench, docs, grades, covered, scores, **kw) -> dict:
    """Fidelity statistics of ratings from a tournament judged by the grades themselves
    (:class:`saber_lib.validation.fidelity.GradeJudge`) on the covered queries: the method's ceiling."""
    return judged_fidelity(grade_judge(grades), bench, docs, grades, covered, scores, **kw)[0]


def _favoured(summary: dict) -> str:
    """Which retrievers the ratings favour and disfavour (rank-shift interval clear of 0), as a phrase."""
    fav, dis = summary.get("favoured") or [], summary.get("disfavoured") or []
    return (f"favoured by the ratings: {', '.join(fav) or 'none'}; disfavoured: {', '.join(dis) or 'none'} "
            f"({summary['setting']}, interval clear of 0)")


def _fmt(summary: dict, prefix: str = "") -> str:
    """``tau [low, high] over n systems`` of a fidelity summary (``prefix``: ``ceiling_`` for its ceiling)."""
    tau, lo, hi = (summary.get(prefix + key) for key in ("kendall_tau", "ci_low", "ci_high"))
    if tau is None:
        return "undefined"
    ci = f" [{lo:.2f}, {hi:.2f}]" if lo is not None else ""
    return f"{tau:.2f}{ci} over {summary['n_systems']} systems"


def write_section(ctx, sec: dict) -> None:
    """Writes the section's Parquet files, ``system_fidelity.json`` and the captioned tables, and
    records its facts (``grades_file``)."""
    for name, table in sec["tables"].items():
        table.write_parquet(ctx.path(f"{name}.parquet"))
        ctx.save_table(table, name, caption=sec["captions"][name], float_fmt="{:.3f}")
    if sec["fidelity"] is not None:
        ctx.path("system_fidelity.json").write_text(json.dumps(sec["fidelity"], indent=2, sort_keys=True) + "\n")
    sec["inter"].write_parquet(ctx.path("grades_inter_annotator.parquet"))
    ctx.record(grades_file=sec["record"])


def graded_section(ctx, params, pair_judge, base_judge, ordinal_judge, judge_ctx: JudgeContext, backends: str) -> dict:
    """The stage's graded-labels section from its notebook: ``params`` are the notebook's parameters
    (``jv_grades`` and the other ``judge_validation`` / ``tournament`` keys, ``ndcg_k``,
    ``tie_policy``, ``llm``, ``seed``, ``data_dir``); the corpus, benchmark, ratings and the
    evaluate stage's scores are read through ``ctx.input``. Writes the section (:func:`write_section`)
    and the figure ``system_fidelity`` (the two system orders, and each retriever's rank shift with its
    interval); returns the section (None without ``jv_grades``)."""
    import matplotlib.pyplot as plt  # pyplot only once saber_lib.report.plots has chosen the backend

    path = grades_path(params["jv_grades"], params["data_dir"])
    if path is None:
        return None
    p = params
    bench, scores = pl.read_parquet(ctx.input("select", "benchmark.parquet")), pl.read_parquet(ctx.input("evaluate", "scores.parquet"))
    sec = grades_section(
        path, pl.read_parquet(ctx.input("corpus", "corpus.parquet")), bench,
        pl.read_parquet(ctx.input("tournament", "ratings.parquet")), scores,
        data_dir=p["data_dir"], pair_judge=pair_judge, base_judge=base_judge, second_judge=p["jv_second_judge"],
        judge_ctx=judge_ctx, majority_votes=p["jv_majority_votes"], ordinal_judge=ordinal_judge, schedule=p["schedule"],
        schedules=p["jv_schedules"], rounds=p["rounds"], seed=p["seed"], store_dir=ctx.path("graded"),
        alpha=p["bt_alpha"], top=p["rating_top"], llm=p["llm"], min_gap=p["jv_grade_min_gap"],
        per_query=p["jv_grade_pairs"], n_resamples=p["jv_n_resamples"], level=p["jv_ci_level"], k=p["ndcg_k"],
        tie_policy=p["tie_policy"], backends=backends)
    write_section(ctx, sec)
    sec["shown"] = [(f"{name}: {sec['captions'][name]}", table) for name, table in sec["tables"].items()]
    if sec["fidelity"] is not None:
        fig, (ax, ax_shift) = plt.subplots(1, 2, figsize=(11.5, 4.4), gridspec_kw={"width_ratios": [1.2, 1]})
        fidelity.fidelity_figure(sec["tables"]["system_fidelity"], sec["fidelity"], ax=ax)
        fidelity.rank_shift_figure(sec["tables"]["system_fidelity"], ax=ax_shift)
        fig.tight_layout()
        ctx.save_figure(fig, "system_fidelity", caption=sec["captions"]["system_fidelity"], backends=backends)
        sec["figure"] = fig
        sec["shown"] += vstability.write_limits(ctx, sec, p, bench=bench, scores=scores, backends=backends)
    return sec
