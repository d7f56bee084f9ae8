"""TREC run files and BEIR qrels: reading (a malformed line is an error naming the file and line) and
writing runs."""
from __future__ import annotations

import math
from pathlib import Path

import polars as pl

from ..core.data import NotUTF8, read_text


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
