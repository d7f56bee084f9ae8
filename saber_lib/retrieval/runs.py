"""TREC run files and BEIR qrels: reading (a malformed line is an error naming the file and line) and
writing runs; the run-file retriever ``run:<path>``, whose scores are read from a TREC run of an
external system (this module is the one place that knows the ``run:`` prefix)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl

from ..core.data import NotUTF8, read_text
from .base import Retriever
from .registry import register_retriever

RUN_PREFIX = "run:"


class TrecRunError(ValueError):
    pass


def read_trec_run(path):
    """A TREC run file ``qid Q0 docid rank score tag`` (whitespace separated) as a polars frame
    with ``query_id``, ``cand_id``, ``rank``, ``score``, ``tag``. A malformed line raises
    :class:`TrecRunError` naming the file and line; a (query, doc) pair listed twice too."""
    path = Path(path)
    rows, seen = [], set()
    try:
        text = read_text(path)  # not UTF-8: one error naming the file, byte offset and line
    except NotUTF8 as e:
        raise TrecRunError(str(e)) from None
    for ln, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 6:
            raise TrecRunError(f"{path}:{ln}: expected 6 fields 'qid Q0 docid rank score tag', got {len(parts)}")
        qid, _, did, rank, score, tag = parts
        try:
            rank_i, score_f = int(rank), float(score)
        except ValueError:
            raise TrecRunError(f"{path}:{ln}: rank must be an integer and score a number") from None
        if not math.isfinite(score_f):
            raise TrecRunError(f"{path}:{ln}: score is not finite")
        if (qid, did) in seen:
            raise TrecRunError(f"{path}:{ln}: document {did!r} listed twice for query {qid!r}")
        seen.add((qid, did))
        rows.append((qid, did, rank_i, score_f, tag))
    return pl.DataFrame(rows, schema={"query_id": pl.Utf8, "cand_id": pl.Utf8, "rank": pl.Int64,
                                      "score": pl.Float64, "tag": pl.Utf8}, orient="row")


def write_trec_run(df, path, tag: str = "saber") -> None:
    """Write ``query_id``, ``cand_id``, ``score`` as a TREC run (ranks by descending score, ties by
    row order)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    d = df.with_row_index("_row").sort(["query_id", "score", "_row"], descending=[False, True, False])
    d = d.with_columns(pl.int_range(1, pl.len() + 1).over("query_id").alias("_rank"))
    with open(path, "w", encoding="utf-8") as f:
        for q, c, r, s in d.select("query_id", "cand_id", "_rank", "score").iter_rows():
            f.write(f"{q} Q0 {c} {r} {s:.6f} {tag}\n")


def read_qrels(path) -> dict[str, dict[str, int]]:
    """BEIR qrels (``query-id corpus-id score`` with a header) as {query: {doc: grade}}; a bad line
    raises an error naming the file and line."""
    path = Path(path)
    out: dict[str, dict[str, int]] = {}
    with open(path, encoding="utf-8") as f:
        for ln, line in enumerate(f, 1):
            parts = line.rstrip("\n").split("\t")
            if ln == 1 and parts[0] == "query-id":
                continue
            if not line.strip():
                continue
            if len(parts) != 3:
                raise ValueError(f"{path}:{ln}: expected 3 tab-separated fields")
            try:
                out.setdefault(parts[0], {})[parts[1]] = int(parts[2])
            except ValueError:
                raise ValueError(f"{path}:{ln}: score {parts[2]!r} is not an integer") from None
    return out


class RunFileRetriever(Retriever):
    """Scores from a TREC run: a candidate missing from the run scores below every listed one.

    ``min_match`` (``evaluate.run_min_match``): a query whose candidates the run lists fewer than
    this share of, or none of, is an error naming the file (a run of another benchmark, or with
    other document ids, would otherwise score as a poor system)."""

    def __init__(self, path, min_match: float = 0.0):
        self.path = Path(path)
        self.min_match = float(min_match)
        self.run = read_trec_run(self.path)
        self.name = f"{RUN_PREFIX}{self.path.stem}"
        tags = sorted(set(self.run["tag"].to_list()))
        self.backend = f"TREC run {self.path.name} ({', '.join(tags[:3])})"
        self._by_q: dict[str, dict[str, float]] = {}
        for q, c, s in self.run.select("query_id", "cand_id", "score").iter_rows():
            self._by_q.setdefault(q, {})[c] = s

    def score(self, query, candidates):
        raise TypeError("a run-file retriever scores by ids: use score_many(..., query_ids, candidate_ids)")

    def score_many(self, queries, candidate_lists, query_ids=None, candidate_ids=None):
        if query_ids is None or candidate_ids is None:
            raise TypeError("a run-file retriever needs query_ids and candidate_ids")
        out = []
        for q, cids in zip(query_ids, candidate_ids):
            got = self._by_q.get(q, {})
            n_match = sum(c in got for c in cids)
            if cids and (n_match == 0 or n_match < self.min_match * len(cids)):
                raise TrecRunError(
                    f"{self.path}: the run lists {n_match} of the {len(cids)} candidates of query {q!r} "
                    f"(evaluate.run_min_match = {self.min_match:g}); is it a run of this benchmark, "
                    "with its document ids?")
            floor = min([0.0] + list(got.values())) - 1.0
            out.append(np.array([got.get(c, floor) for c in cids], dtype=np.float64))
        return out


@register_retriever(RUN_PREFIX, prefix=True, file_argument=True, fixed_scores=True, retriever_class="run file",
                    summary="a TREC run file")
def _run_file(argument: str, run_min_match: float = 0.0) -> Retriever:
    """A TREC run file's scores (``evaluate.run_min_match``: the share of a query's candidates it must list)."""
    return RunFileRetriever(argument, min_match=run_min_match)
