"""The judge-validation stage's reference-file section (``judge_validation.jv_reference``).

Every method the stage compares is scored on the reference file's triples whose query and both
candidates are in the run's corpus (rows naming other documents are skipped and counted; an id in no
corpus source stops the stage, naming the file and line): the pairwise judge, the second judge
(``jv_second_judge``), the majority and ordinal judges where they run
(:func:`saber_lib.validation.agreement.method_labels`), and the benchmark's ranking and the other
schedules' rankings on the triples whose two candidates are both candidates of that query in the
benchmark. Tables (:mod:`saber_lib.validation.reference`): agreement with a bootstrap interval over
queries, agreement by rank gap in the benchmark's ranking, inter-annotator agreement of the triples
labelled more than once. The widget's annotations keep their own tables.
"""
from __future__ import annotations

from pathlib import Path

import polars as pl

from ..judging.registry import JudgeContext, build_judge
from ..judging.tournament import corpus_docs
from . import agreement as ag
from . import reference as ref
from ..studies.ablation import final_ranks


def reference_docs(corpus: pl.DataFrame, bench: pl.DataFrame, trip: pl.DataFrame, max_words: int) -> dict:
    """Docs the methods read: the triples' documents and every benchmark candidate of their queries
    (the schedules' tournaments), clipped to ``max_words`` words (0 = whole texts)."""
    queries = trip["query_id"].unique().to_list()
    ids = set(queries) | set(trip["a"]) | set(trip["b"])
    ids |= set(bench.filter(pl.col("query_id").is_in(queries))["cand_id"])
    return corpus_docs(corpus, ids=ids, max_words=max_words)


def rank_gaps(trip: pl.DataFrame, ratings: pl.DataFrame) -> list:
    """Per triple the gap between its candidates' ranks in the benchmark's final ranking (None when
    either is not a benchmark candidate of the query)."""
    ranks = {(q, c): r for q, c, r in final_ranks(ratings).select("query_id", "cand_id", "rank").iter_rows()}
    out = []
    for q, a, b in trip.select("query_id", "a", "b").iter_rows():
        ra, rb = ranks.get((q, a)), ranks.get((q, b))
        out.append(None if ra is None or rb is None else abs(int(ra) - int(rb)))
    return out


def reference_section(path: Path, corpus: pl.DataFrame, bench: pl.DataFrame, ratings: pl.DataFrame, *,
                      data_dir, pair_judge, base_judge, second_judge: str, judge_ctx: JudgeContext, majority_votes: int,
                      ordinal_judge, schedule: str, schedules, rounds: int, seed: int, store_dir, alpha: float,
                      top: float, llm: dict, deltas, n_resamples: int, level: float, backends: str) -> dict:
    """Labels, tables, captions and manifest facts of the reference section (module docstring).

    Returns ``{"labels": per-triple labels of every method, "tables": name -> table,
    "captions": name -> caption, "record": facts for ctx.record}``."""
    rows = ref.read_reference(path)
    kept, skipped = ref.split_by_corpus(rows, corpus["doc_id"].to_list(), path,
                                        lambda src: ref.source_ids(data_dir, src))
    trip = ref.triples(kept)
    skip_note = (f"{skipped.height} of {rows.height} rows skipped (a document not in this run's corpus)"
                 if skipped.height else f"all {rows.height} rows used")
    record = {"file": str(path), "rows": rows.height, "skipped_rows": skipped.height, "triples": trip.height,
              "queries": trip["query_id"].n_unique(), "notes": []}
    if trip.height == 0:
        record["notes"].append("no triple has its three documents in the corpus: nothing scored")
        return {"labels": trip, "tables": {}, "captions": {}, "record": record}
    max_words = llm.get("text_max_words", 0) if llm["backend"] != "none" else 0   # as the sampled pairs' texts
    docs = reference_docs(corpus, bench, trip, max_words)
    gaps = rank_gaps(trip, ratings)
    in_bench = sum(g is not None for g in gaps)
    methods, notes = ag.method_labels(trip, docs, bench, ratings, pair_judge=pair_judge, base_judge=base_judge,
                                      majority_votes=majority_votes, ordinal_judge=ordinal_judge, schedule=schedule,
                                      schedules=schedules if in_bench else [], rounds=rounds, seed=seed,
                                      store_dir=Path(store_dir), alpha=alpha, top=top)
    second = build_judge(second_judge, judge_ctx)
    methods = {**dict(list(methods.items())[:1]), f"second judge ({second.name})": ag.judge_labels(second, trip, docs),
               **dict(list(methods.items())[1:])}
    tables = {
        "reference_agreement": ref.reference_agreement_table(methods, trip, n_resamples=n_resamples, level=level, seed=seed),
        "reference_by_gap": ref.by_gap_table(methods, trip, gaps, deltas),
        "reference_inter_annotator": ref.inter_annotator_table(trip, n_resamples=n_resamples, level=level, seed=seed),
    }
    where = (f"reference labels {path.name} ({trip.height} triples of {record['queries']} queries; {skip_note}; "
             f"rankings scored on the {in_bench} triples whose candidates are both in the benchmark)")
    captions = {
        "reference_agreement": (f"Agreement (%) with the {where}: paper scoring (1 same label, 0.5 one side a tie; "
                                f"a triple labelled twice scores the mean over its labels), {level:.0%} bootstrap "
                                f"interval over queries ({n_resamples} resamples); {backends}"),
        "reference_by_gap": (f"Agreement (%) with the {where}, on triples whose rank gap in the benchmark's "
                             f"ranking is at least delta; {backends}"),
        "reference_inter_annotator": (f"Agreement (%) between the labels of the {path.name} triples labelled more "
                                      f"than once (paper scoring; identical: all labels equal), {level:.0%} "
                                      f"bootstrap interval over queries"),
    }
    labels = trip.select("query_id", "a", "b", "labels").with_columns(
        pl.Series("rank_gap", gaps, dtype=pl.Int64),
        *[pl.Series(m, lab, dtype=pl.String) for m, lab in methods.items()])
    record.update(notes=notes, triples_in_benchmark=in_bench,
                  agreement={r["method"]: r["agreement"] for r in tables["reference_agreement"].iter_rows(named=True)})
    return {"labels": labels, "tables": tables, "captions": captions, "record": record}


def stage_section(ctx, params: dict, pair_judge, base_judge, ordinal_judge, judge_ctx: JudgeContext,
                  backends: str) -> dict:
    """The stage's reference section from its notebook: ``params`` are the notebook's parameters
    (``jv_reference`` and the other ``judge_validation`` / ``tournament`` keys, ``llm``, ``seed``,
    ``data_dir``); the corpus, benchmark and ratings are read through ``ctx.input``. Writes
    ``reference_labels.parquet`` and one Parquet file per table (``reference_agreement``,
    ``reference_by_gap``, ``reference_inter_annotator``), saves the tables with their captions
    (``ctx.save_table``) and records the section's facts (``reference_file``). Returns the tables
    (none without ``jv_reference``)."""
    path = ref.reference_path(params["jv_reference"], params["data_dir"])
    if path is None:
        return {}
    p = params
    sec = reference_section(
        path, pl.read_parquet(ctx.input("corpus", "corpus.parquet")), pl.read_parquet(ctx.input("select", "benchmark.parquet")),
        pl.read_parquet(ctx.input("tournament", "ratings.parquet")), data_dir=p["data_dir"], pair_judge=pair_judge,
        base_judge=base_judge, second_judge=p["jv_second_judge"], judge_ctx=judge_ctx, majority_votes=p["jv_majority_votes"],
        ordinal_judge=ordinal_judge, schedule=p["schedule"], schedules=p["jv_schedules"], rounds=p["rounds"],
        seed=p["seed"], store_dir=ctx.path("reference"), alpha=p["bt_alpha"], top=p["rating_top"], llm=p["llm"],
        deltas=p["jv_deltas"], n_resamples=p["jv_n_resamples"], level=p["jv_ci_level"], backends=backends)
    sec["labels"].write_parquet(ctx.path("reference_labels.parquet"))
    for name, table in sec["tables"].items():
        table.write_parquet(ctx.path(f"{name}.parquet"))
        ctx.save_table(table, name, caption=sec["captions"][name], float_fmt="{:.1f}")
    ctx.record(reference_file=sec["record"])
    return sec["tables"]
