"""Export the benchmark in the BEIR / MTEB retrieval layout, and import external TREC runs.

Layout written by :func:`export_beir` into ``out_dir``::

    corpus.jsonl      {"_id": cand_id, "title": "", "text": document text of the setting}
    queries.jsonl     {"_id": query_id, "text": query text of the setting}
    qrels/test.tsv    query-id <TAB> corpus-id <TAB> score   (header line; graded 0..5)
    qrels/test.sidecar.tsv   (when the ratings carry ``rating_se``) query-id, corpus-id, rating,
                      rating-se, judgments-seen, judge, prompt-hash: the ungraded rating, its
                      standard error over the tournament's rating draws, the non-failed judgments
                      the candidate took part in, the judge and a hash of its prompt template
                      (the frame: :func:`qrels_sidecar`)

The corpus holds every candidate of every query (the union of the 3K-candidate lists), so a model
evaluated as a full retriever searches all of them; the paper's protocol reranks each query's own
list (``saber_lib.retrieval``), which gives the same nDCG only when other queries' candidates do
not intrude into the top k.

Grades: the tournament rating ``r`` (Bradley-Terry log-strength rescaled to [0, 5]) becomes the
integer ``floor(r + 0.5)`` (round half up), so 0 <= grade <= 5; every judged candidate is listed,
grade-0 ones included. TREC runs: :func:`saber_lib.retrieval.runs.read_trec_run` /
:func:`import_trec_run`.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl

from ..core.data import load_manifest
from ..judging.draws import rating_se
from ..retrieval.runs import RunFileRetriever
from ..core.text import setting_texts


def rating_to_grade(rating) -> np.ndarray:
    """Integer grade ``floor(r + 0.5)`` clipped to [0, 5] (round half up)."""
    r = np.asarray(rating, dtype=np.float64)
    if np.isnan(r).any():
        raise ValueError("ratings contain NaN")
    return np.clip(np.floor(r + 0.5), 0, 5).astype(np.int64)


def export_beir(out_dir, ratings, corpus, setting: str = "statement-full", queries=None, judge: str | None = None,
                prompt_hash: str | None = None) -> dict:
    """Write corpus.jsonl, queries.jsonl and qrels/test.tsv (and the qrels sidecar when ``ratings``
    has ``rating_se``; ``judge`` and ``prompt_hash`` fill its last columns); returns counts.

    ``ratings``: polars frame ``query_id``, ``cand_id``, ``rating`` (tournament/ratings.parquet);
    ``corpus``: ``doc_id``, ``problem``, ``solution``; ``queries`` (``query_id``, ``problem``,
    ``solution``): the query texts when queries are not corpus documents (the released benchmark).
    Rows are written in sorted id order so the files are byte-identical for the same inputs.
    """
    out = Path(out_dir)
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    texts = {d: (p, s) for d, p, s in corpus.select("doc_id", "problem", "solution").iter_rows()}
    qtexts = texts if queries is None else {
        q: (p, s) for q, p, s in queries.select("query_id", "problem", "solution").iter_rows()}
    missing = sorted((set(ratings["query_id"]) - set(qtexts)) | (set(ratings["cand_id"]) - set(texts)))
    if missing:
        raise KeyError(f"{len(missing)} rated ids not in the corpus, e.g. {missing[:3]}")
    qids = sorted(set(ratings["query_id"]))
    cids = sorted(set(ratings["cand_id"]))
    with open(out / "queries.jsonl", "w", encoding="utf-8") as f:
        for q in qids:
            f.write(json.dumps({"_id": q, "text": setting_texts(setting, *qtexts[q])[0]}, ensure_ascii=False) + "\n")
    with open(out / "corpus.jsonl", "w", encoding="utf-8") as f:
        for c in cids:
            f.write(json.dumps({"_id": c, "title": "", "text": setting_texts(setting, *texts[c])[1]},
                               ensure_ascii=False) + "\n")
    r = ratings.select("query_id", "cand_id", "rating").sort("query_id", "cand_id")
    grades = rating_to_grade(r["rating"].to_numpy())
    with open(out / "qrels" / "test.tsv", "w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for (q, c, _), g in zip(r.iter_rows(), grades):
            f.write(f"{q}\t{c}\t{int(g)}\n")
    info = {"queries": len(qids), "corpus": len(cids), "qrels": r.height,
            "grade_counts": {int(k): int(v) for k, v in zip(*np.unique(grades, return_counts=True))}}
    if "rating_se" in ratings.columns:
        side = qrels_sidecar(ratings, judge_id=judge, prompt_hash=prompt_hash)
        info["sidecar"] = str(write_qrels_sidecar(side, out).relative_to(out))
    return info


def qrels_sidecar(ratings, draws=None, judgments=None, *, judge_id: str, prompt_hash: str | None = None
                  ) -> pl.DataFrame:
    """One row per rated candidate: ``query_id, cand_id, rating, rating_se, judgments_seen, judge,
    prompt_hash`` (sorted by ids, like the BEIR qrels).

    ``rating_se`` comes from ``draws``, else from the ratings' own ``rating_se`` column (null
    without either); ``judgments_seen`` counts the non-failed judgments the candidate took part in,
    from ``judgments`` when given, else the ratings' ``n_judged`` column."""
    base = ratings.select("query_id", "cand_id", "rating")
    if draws is not None:
        base = base.join(rating_se(draws).select("query_id", "cand_id", "rating_se"),
                         on=["query_id", "cand_id"], how="left")
    elif "rating_se" in ratings.columns:
        base = ratings.select("query_id", "cand_id", "rating", "rating_se")
    else:
        base = base.with_columns(pl.lit(None, dtype=pl.Float64).alias("rating_se"))
    if judgments is not None:
        ok = judgments.filter(pl.col("outcome") != "failure")
        seen = pl.concat([ok.select("query_id", pl.col("a").alias("cand_id")),
                          ok.select("query_id", pl.col("b").alias("cand_id"))]).group_by(
            "query_id", "cand_id").agg(pl.len().cast(pl.Int64).alias("judgments_seen"))
        base = base.join(seen, on=["query_id", "cand_id"], how="left").with_columns(
            pl.col("judgments_seen").fill_null(0))
    elif "n_judged" in ratings.columns:
        base = base.join(ratings.select("query_id", "cand_id", pl.col("n_judged").cast(pl.Int64)
                                        .alias("judgments_seen")), on=["query_id", "cand_id"], how="left")
    else:
        raise ValueError("qrels_sidecar needs judgments or a ratings table with n_judged")
    return base.with_columns(pl.lit(judge_id, dtype=pl.String).alias("judge"),
                             pl.lit(prompt_hash, dtype=pl.String).alias("prompt_hash")).sort("query_id", "cand_id")


def write_qrels_sidecar(sidecar, out_dir, split: str = "test") -> Path:
    """Write the sidecar next to BEIR qrels as ``<out_dir>/qrels/<split>.sidecar.tsv`` (header line,
    tab-separated, ratings with 6 decimals); returns the path. ``sidecar``: ``query_id, cand_id,
    rating, rating_se, judgments_seen, judge, prompt_hash``."""
    path = Path(out_dir) / "qrels" / f"{split}.sidecar.tsv"
    path.parent.mkdir(parents=True, exist_ok=True)
    cols = ["query_id", "cand_id", "rating", "rating_se", "judgments_seen", "judge", "prompt_hash"]
    with open(path, "w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\trating\trating-se\tjudgments-seen\tjudge\tprompt-hash\n")
        for q, c, r, se, n, j, h in sidecar.select(cols).iter_rows():
            f.write(f"{q}\t{c}\t{r:.6f}\t{'' if se is None else f'{se:.6f}'}\t{n}\t{j or ''}\t{h or ''}\n")
    return path


def export_run(run_dir, out_dir, setting: str = "statement-full", check=None) -> dict:
    """``saber export``: the benchmark of a run directory in the BEIR layout: the built one
    (``tournament/ratings.parquet`` + ``corpus/corpus.parquet``) when the run has it (or has a
    tournament folder), else the released one (stage ``released``). ``check`` (the stage names to
    be read) runs before anything is read and raises when one of them is not finished and intact
    (``saber export`` passes the runner's check)."""
    run = Path(run_dir)
    if (run / "tournament").is_dir():
        if check is not None:
            check(["corpus", "tournament"])
        # the sidecar names who judged, as the evaluate stage's export does: what the tournament recorded
        judged = (load_manifest(run / "tournament" / "manifest.json") or {}).get("info") or {}
        return export_beir(out_dir, pl.read_parquet(run / "tournament" / "ratings.parquet"),
                           pl.read_parquet(run / "corpus" / "corpus.parquet"), setting=setting,
                           judge=judged.get("judge"), prompt_hash=judged.get("judge_prompt_hash"))
    if (run / "released").is_dir():
        if check is not None:
            check(["released"])
        return export_beir(out_dir, pl.read_parquet(run / "released" / "ratings.parquet"),
                           pl.read_parquet(run / "released" / "documents.parquet"), setting=setting,
                           queries=pl.read_parquet(run / "released" / "queries.parquet"))
    raise FileNotFoundError(f"{run}: no benchmark to export (neither a tournament nor a released stage): "
                            f"run the stages first")


def import_trec_run(path, benchmark, name: str | None = None, setting: str = "statement-full"):
    """Scores of an external system's TREC run on the benchmark's candidate lists, in the layout of
    ``evaluate/scores.parquet`` (a candidate the run does not list scores below every listed one)."""
    r = RunFileRetriever(path)
    rows = []
    for (q,), g in benchmark.sort("query_id", "position").group_by(["query_id"], maintain_order=True):
        cids = g["cand_id"].to_list()
        s = r.score_many([""], [cids], query_ids=[q], candidate_ids=[cids])[0]
        rows += [(name or r.name, setting, q, c, float(v)) for c, v in zip(cids, s)]
    return pl.DataFrame(rows, schema={"retriever": pl.Utf8, "setting": pl.Utf8, "query_id": pl.Utf8,
                                      "cand_id": pl.Utf8, "score": pl.Float64}, orient="row")
