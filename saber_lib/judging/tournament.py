"""The tournament driver (paper 3.5, App. B.4): :func:`run_tournament` plays all queries of
a benchmark round by round, judging the pairs of every query in one batch per round, and appends
each finished round to a store so that a killed run resumes at the last finished round;
:func:`ratings_from_judgments` refits the ratings from stored judgments without any new judge call.
Also the documents a judge sees (:class:`Doc`) and the judgments table's schema and reports.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import polars as pl

from ..core.data import atomic_write
from ..core.progress import Progress
from ..core.text import clip_words, document_text
from .bradley_terry import rescale, single_thread_blas
from .judge_base import JudgeFault, checked_labels
from .outcomes import outcome_label
from .rounds import play_rounds
from .schedules import SCHEDULES, Standing, exhaustive_rounds


@dataclass(frozen=True)
class Doc:
    """A problem the judge sees (query or candidate), with its id (the simulated judge only uses
    the id; the proxy judge the full :attr:`text`)."""

    id: str
    problem: str
    solution: str = ""

    @property
    def text(self) -> str:
        """The document text judged and retrieved: ``"Problem: {p}\\n\\nSolution: {s}"``."""
        return document_text(self.problem, self.solution)


def corpus_docs(corpus, ids=None, max_words: int = 0) -> dict[str, Doc]:
    """doc_id -> :class:`Doc` for the rows of ``corpus/corpus.parquet`` (a polars DataFrame),
    optionally only ``ids``; ``max_words`` > 0 clips each problem and solution to that many words
    (``llm.text_max_words``: a prompt budget for slow CPUs, named in the captions)."""
    df = corpus.select("doc_id", "problem", "solution")
    if ids is not None:
        df = df.filter(pl.col("doc_id").is_in(list(set(ids))))
    return {d: Doc(d, clip_words(p, max_words), clip_words(s, max_words)) for d, p, s in df.iter_rows()}


@dataclass
class QueryPlan:
    query_id: str
    cand_ids: list[str]
    positions: list[int]
    groups: list[str]


def plan_queries(benchmark, max_queries: int = 0) -> list[QueryPlan]:
    """Queries of a ``select/benchmark.parquet`` table in order of first appearance, candidates by
    ``position``; ``max_queries > 0`` keeps the first ones."""
    need = {"query_id", "cand_id", "position"}
    missing = need - set(benchmark.columns)
    if missing:
        raise ValueError(f"benchmark table lacks columns {sorted(missing)}")
    b = benchmark.with_row_index("_row")
    if "group" not in b.columns:
        b = b.with_columns(pl.lit(None, dtype=pl.String).alias("group"))
    order = b.group_by("query_id").agg(pl.col("_row").min()).sort("_row")["query_id"].to_list()
    if max_queries:
        order = order[:max_queries]
    plans = []
    # one pass over the table (a filter per query would scan it once per query: quadratic in queries)
    rows_of = {k[0]: g for k, g in b.filter(pl.col("query_id").is_in(order)).group_by("query_id")}
    for q in order:
        sub = rows_of[q].sort("position")
        cands = sub["cand_id"].cast(pl.String).to_list()
        if len(set(cands)) != len(cands):
            raise ValueError(f"benchmark: query {q!r} lists a candidate twice")
        plans.append(QueryPlan(str(q), cands, sub["position"].to_list(), sub["group"].to_list()))
    return plans


JUDGMENT_SCHEMA = {"query_id": "String", "round": "Int32", "a": "String", "b": "String",
                   "outcome": "String", "judge": "String", "reason": "String",
                   "position_consistent": "Boolean"}


RATINGS_SCHEMA = {"query_id": pl.String, "cand_id": pl.String, "position": pl.Int64, "group": pl.String,
                  "theta": pl.Float64, "rating": pl.Float64, "wins": pl.Float64, "n_judged": pl.Int64}


def _empty_judgments():
    return pl.DataFrame(schema={k: getattr(pl, v) for k, v in JUDGMENT_SCHEMA.items()})


class JudgmentStore:
    """Per-round Parquet files ``<dir>/round_NNNN.parquet`` plus a ``fingerprint.json`` naming the
    schedule, judge, seed and query set they belong to. A round file is written atomically once
    the whole round is judged, so a killed run resumes at the last finished round."""

    def __init__(self, directory, fingerprint: dict):
        self.dir = Path(directory)
        self.fingerprint = fingerprint
        fp = self.dir / "fingerprint.json"
        if fp.exists() and json.loads(fp.read_text()) != fingerprint:
            old = json.loads(fp.read_text())
            raise ValueError(
                f"{self.dir}: stored judgments belong to another setting ({old}); remove the folder "
                f"to start over with {fingerprint}")
        self.dir.mkdir(parents=True, exist_ok=True)
        if not fp.exists():
            fp.write_text(json.dumps(fingerprint, indent=2, sort_keys=True) + "\n")

    def rounds(self) -> list[int]:
        return sorted(int(p.stem.split("_")[1]) for p in self.dir.glob("round_*.parquet"))

    def load(self):
        done = self.rounds()
        if not done:
            return _empty_judgments()
        return pl.concat([self._read_round(r) for r in done])

    def _read_round(self, r: int):
        path = self.dir / f"round_{r:04d}.parquet"
        try:
            return pl.read_parquet(path)
        except (pl.exceptions.PolarsError, OSError) as e:
            why = (str(e).strip().splitlines() or [""])[0]
            raise ValueError(
                f"{path}: stored tournament round is damaged ({type(e).__name__}: {why}); judge again with "
                f"'saber run tournament --force' (answers come from the LLM cache), or remove this file "
                f"and the later round files to resume from the round before it") from None

    def append(self, r: int, df) -> None:
        # whole or not at all: a failed write leaves no temporary file and no round
        atomic_write(self.dir / f"round_{r:04d}.parquet", df.write_parquet)


@dataclass
class TournamentResult:
    judgments: object  # polars DataFrame (JUDGMENT_SCHEMA)
    ratings: object    # polars DataFrame
    rounds_played: int
    judge_calls: int   # judgments requested in this call (0 when everything was stored)


def run_tournament(benchmark, docs: dict[str, Doc], judge, *, schedule: str = "swiss", rounds: int = 20,
                   seed: int = 0, store_dir, alpha: float = 0.5, top: float = 5.0, max_queries: int = 0,
                   stop_after: int | None = None, progress: Callable[[int, int], None] | None = None
                   ) -> TournamentResult:
    """Play the tournament of every benchmark query and fit its ratings.

    Rounds are played by :func:`saber_lib.judging.rounds.play_rounds`: round ``r`` of every query
    is scheduled from that query's stored judgments, the order in which each pair is shown is a
    seeded coin flip, all queries' pairs are judged in one ``judge.judge_pairs`` batch, and the
    round is appended to the store. Rounds already in the
    store are not judged again. ``schedule='exhaustive'`` plays all pairs (``rounds`` ignored).
    ``stop_after`` stops after that many new rounds (used to test resumption).
    """
    with single_thread_blas():
        return _run_tournament(benchmark, docs, judge, schedule=schedule, rounds=rounds, seed=seed,
                               store_dir=store_dir, alpha=alpha, top=top, max_queries=max_queries,
                               stop_after=stop_after, progress=progress)


def _run_tournament(benchmark, docs, judge, *, schedule, rounds, seed, store_dir, alpha, top, max_queries,
                    stop_after, progress):
    if schedule not in SCHEDULES:
        raise ValueError(f"tournament.schedule: unknown schedule {schedule!r} (expected one of {SCHEDULES})")
    plans = plan_queries(benchmark, max_queries)
    missing = sorted({q.query_id for q in plans} - set(docs)
                     | {c for q in plans for c in q.cand_ids} - set(docs))
    if missing:
        raise ValueError(f"no corpus text for {len(missing)} benchmark ids, e.g. {missing[:3]} (not in the corpus)")
    fingerprint = {"schedule": schedule, "judge": judge.name, "seed": int(seed), "alpha": float(alpha),
                   "queries": hashlib.sha256(json.dumps(
                       [[q.query_id, q.cand_ids] for q in plans]).encode()).hexdigest()}
    store = JudgmentStore(store_dir, fingerprint)
    done = store.rounds()
    if done != list(range(1, len(done) + 1)):
        raise ValueError(f"{store.dir}: round files {done} have a gap; remove the folder to start over")
    stored = store.load()
    standings = {q.query_id: Standing(len(q.cand_ids)) for q in plans}
    index = {q.query_id: {c: k for k, c in enumerate(q.cand_ids)} for q in plans}
    _replay(stored, standings, index)
    n_max = max((len(q.cand_ids) for q in plans), default=0)
    total = exhaustive_rounds(n_max) if schedule == "exhaustive" else rounds
    plan_of = {q.query_id: q for q in plans}
    calls = 0

    def judge_round(r, shown):
        nonlocal calls
        rows = [(q, plan_of[q].cand_ids[a], plan_of[q].cand_ids[b]) for q, a, b in shown]
        items = [(docs[q], docs[ca], docs[cb]) for q, ca, cb in rows]
        verdicts = judge.judge_pairs(items) if items else []
        calls += len(items)
        # every verdict checked before anything is stored: an incomplete round is never resumed from
        try:
            checked_labels(judge, verdicts, len(items))
        except JudgeFault as e:
            raise JudgeFault(f"round {r}: {e}") from None
        cons = getattr(judge, "last_consistency", None) if items else None
        recs, labels = [], []
        for k, ((qid, ca, cb), v) in enumerate(zip(rows, verdicts)):
            label, reason = outcome_label(v)
            labels.append(label)
            recs.append({"query_id": qid, "round": r, "a": ca, "b": cb, "outcome": label, "judge": judge.name,
                         "reason": reason, "position_consistent": cons[k] if cons else None})
        df = pl.DataFrame(recs, schema={k: getattr(pl, t) for k, t in JUDGMENT_SCHEMA.items()}) if recs \
            else _empty_judgments()
        store.append(r, df)
        counter.set(r)
        if progress:
            progress(r, total)
        return labels

    last = total if stop_after is None else min(total, len(done) + stop_after)
    with Progress("round", total) as counter:
        counter.set(len(done))
        play_rounds([q.query_id for q in plans], standings, judge_round, first_round=len(done) + 1, last_round=last,
                    schedule=schedule, seed=seed, alpha=alpha)
    judgments = store.load()
    ratings = ratings_from_judgments(judgments, benchmark, alpha=alpha, top=top, max_queries=max_queries)
    return TournamentResult(judgments, ratings, len(store.rounds()), calls)


def _replay(df, standings, index):
    for qid, a, b, o in df.select("query_id", "a", "b", "outcome").iter_rows():
        idx = index[qid]
        standings[qid].record(idx[a], idx[b], o)


def ratings_from_judgments(judgments, benchmark, alpha: float = 0.5, top: float = 5.0, max_queries: int = 0):
    """Per-query Bradley-Terry fit of stored judgments -> ratings table (CONTRIBUTING contract):
    ``query_id, cand_id, position, group, theta, rating (0..top), wins, n_judged``.

    ``wins`` counts preferences (a tie is half a win); ``n_judged`` counts non-failed judgments.
    """
    with single_thread_blas():
        return _ratings(judgments, benchmark, alpha, top, max_queries)


def _ratings(judgments, benchmark, alpha, top, max_queries):
    out = []
    by_q = {k[0]: g for k, g in judgments.group_by("query_id")} if judgments.height else {}
    for q in plan_queries(benchmark, max_queries):
        idx = {c: k for k, c in enumerate(q.cand_ids)}
        n = len(q.cand_ids)
        st = Standing(n)
        judged = np.zeros(n, dtype=np.int64)
        g = by_q.get(q.query_id)
        if g is not None:
            for a, b, o in g.select("a", "b", "outcome").iter_rows():
                st.record(idx[a], idx[b], o)
                if o != "failure":
                    judged[idx[a]] += 1
                    judged[idx[b]] += 1
        theta = st.fit(alpha)
        rating = rescale(theta, top)
        out.append(pl.DataFrame({
            "query_id": [q.query_id] * n, "cand_id": q.cand_ids, "position": q.positions, "group": q.groups,
            "theta": theta, "rating": rating, "wins": st.wins, "n_judged": judged,
        }, schema=RATINGS_SCHEMA))
    if not out:
        return pl.DataFrame(schema=RATINGS_SCHEMA)
    return pl.concat(out)


def judgment_summary(judgments):
    """Per-query counts: judgments, failures, ties, first-shown wins, position-inconsistent pairs."""
    return (judgments.group_by("query_id", maintain_order=True).agg(
        pl.len().alias("judgments"),
        (pl.col("outcome") == "failure").sum().alias("failures"),
        (pl.col("outcome") == "tie").sum().alias("ties"),
        (pl.col("outcome") == "a").sum().alias("first_shown_wins"),
        (pl.col("position_consistent") == False).sum().alias("position_inconsistent"),  # noqa: E712
        pl.col("round").max().alias("rounds"),
    ))


def position_stats(judgments) -> dict:
    """Judge health over stored judgments: ``failure_rate``, ``tie_rate``, ``first_shown_win_rate``
    (share of decided judgments won by the candidate shown first; the order is a coin flip, so a
    position-blind judge sits near 0.5) and ``position_inconsistency_rate`` (position-swapped
    judging only: pairs whose two orders disagreed / pairs answered in both orders, else None)."""
    n = judgments.height
    o = judgments["outcome"]
    decided = int(((o == "a") | (o == "b")).sum())
    both = judgments.filter(pl.col("position_consistent").is_not_null())
    return {
        "judgments": n,
        "failure_rate": float((o == "failure").sum() / n) if n else float("nan"),
        "tie_rate": float((o == "tie").sum() / n) if n else float("nan"),
        "first_shown_win_rate": float((o == "a").sum() / decided) if decided else float("nan"),
        "position_inconsistency_rate": (float((~both["position_consistent"]).sum() / both.height)
                                        if both.height else None),
    }
