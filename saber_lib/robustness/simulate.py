"""Synthetic benchmarks with known answers: latent strengths, the simulated judge on them
(:class:`saber_lib.judging.simulated.SimulatedJudge`: ``P(a wins) = sigmoid(scale * (s_a - s_b) +
bias)``, ``agreement=1`` noiseless) and retrievers of chosen quality. Used by the tests and by
``benchmarks/bench_stopping.py``.
"""
from __future__ import annotations

import numpy as np
import polars as pl

from ..judging.simulated import SimulatedJudge
from ..judging.rounds import play_rounds
from ..judging.schedules import Standing
from ..judging.outcomes import codes_of_labels, weighted_comparisons
from ..judging.bradley_terry import fit_bradley_terry, rescale


class SyntheticBenchmark:
    """``n_queries`` queries of ``n_cands`` candidates with N(0, 1) latent strengths (seeded).

    ``spread_sd > 0`` makes queries differ in difficulty: query ``q``'s strengths are multiplied by
    ``exp(spread_sd * z_q)`` with ``z_q ~ N(0, 1)`` (a larger factor: candidates further apart, so
    the judge errs less on that query).
    ``query_ids``, ``cand_ids[q]`` (lists), ``strength[q]`` (arrays in candidate order)."""

    def __init__(self, n_queries: int = 50, n_cands: int = 30, seed: int = 0, spread_sd: float = 0.0):
        rng = np.random.default_rng(seed)
        self.query_ids = [f"q{i:03d}" for i in range(n_queries)]
        self.cand_ids = {q: [f"{q}:c{j:03d}" for j in range(n_cands)] for q in self.query_ids}
        self.strength = {q: rng.standard_normal(n_cands) for q in self.query_ids}
        if spread_sd > 0:
            for q in self.query_ids:
                self.strength[q] = self.strength[q] * float(np.exp(spread_sd * rng.standard_normal()))
        self._s = {(q, c): float(s) for q in self.query_ids for c, s in zip(self.cand_ids[q], self.strength[q])}

    def judge(self, agreement: float = 0.78, bias: float = 0.0, seed: int = 0) -> SimulatedJudge:
        """The simulated judge (:class:`saber_lib.judging.simulated.SimulatedJudge`) on these strengths."""
        return SimulatedJudge(agreement, seed, strengths=self._s, bias=bias)

    def scores(self, qualities, seed: int = 1, setting: str = "statement-full") -> pl.DataFrame:
        """Scores of retrievers named by ``qualities`` (name -> noise sd): ``score = s + sd * noise``
        (a smaller sd is a better retriever), in the layout of ``evaluate/scores.parquet``."""
        rng = np.random.default_rng(seed)
        rows = []
        for name, sd in qualities.items():
            for q in self.query_ids:
                sc = self.strength[q] + sd * rng.standard_normal(len(self.cand_ids[q]))
                rows += [(name, setting, q, c, float(v)) for c, v in zip(self.cand_ids[q], sc)]
        return pl.DataFrame(rows, schema={"retriever": pl.String, "setting": pl.String, "query_id": pl.String,
                                          "cand_id": pl.String, "score": pl.Float64}, orient="row")


def realized_agreement(bench: SyntheticBenchmark, judgments) -> float:
    """Share of decided judgments that prefer the candidate with the larger latent strength."""
    s = bench._s
    ok = judgments.filter(pl.col("outcome").is_in(["a", "b"]))
    good = [(o == "a") == (s[(q, a)] > s[(q, b)]) for q, a, b, o in ok.select("query_id", "a", "b", "outcome").iter_rows()]
    return float(np.mean(good)) if good else float("nan")


def swiss_judgments(bench: SyntheticBenchmark, judge, rounds: int = 20, seed: int = 0) -> pl.DataFrame:
    """Plain Swiss tournaments (:func:`saber_lib.judging.rounds.play_rounds`) of every query: a judgments table (``query_id, round, a, b, outcome, judge, reason``)."""
    rows = []
    name = getattr(judge, "name", "judge")
    for q in bench.query_ids:   # one query at a time: rows grouped by query, then round
        cids = bench.cand_ids[q]

        def judge_round(r, shown):
            out = [judge(q, cids[a], cids[b]) for _, a, b in shown]
            rows.extend((q, r, cids[a], cids[b], o, name, None) for (_, a, b), o in zip(shown, out))
            return out

        play_rounds([q], {q: Standing(len(cids))}, judge_round, last_round=rounds, seed=seed)
    return pl.DataFrame(rows, schema={"query_id": pl.String, "round": pl.Int32, "a": pl.String, "b": pl.String,
                                      "outcome": pl.String, "judge": pl.String, "reason": pl.String}, orient="row")


def ratings_table(bench: SyntheticBenchmark, judgments, alpha: float = 0.5, top: float = 5.0) -> pl.DataFrame:
    """Point ratings (``query_id, cand_id, position, theta, rating, n_judged``) refitted from
    judgments with :func:`saber_lib.judging.bradley_terry.fit_bradley_terry` and ``rescale``."""
    by_q = {k[0]: g for k, g in judgments.group_by(["query_id"])}
    parts = []
    for q in bench.query_ids:
        cids = bench.cand_ids[q]
        idx = {c: i for i, c in enumerate(cids)}
        g = by_q.get(q)
        n_j = np.zeros(len(cids), dtype=np.int64)
        if g is None:
            theta = np.zeros(len(cids))
        else:
            ok = g.filter(pl.col("outcome") != "failure")
            a = [idx[x] for x in ok["a"]]
            b = [idx[x] for x in ok["b"]]
            w, lo, wt, _ = weighted_comparisons(a, b, codes_of_labels(ok["outcome"]))
            theta = fit_bradley_terry(len(cids), w, lo, alpha=alpha, weights=wt)
            np.add.at(n_j, a, 1)
            np.add.at(n_j, b, 1)
        parts.append(pl.DataFrame({"query_id": [q] * len(cids), "cand_id": cids,
                                   "position": np.arange(len(cids), dtype=np.int64), "theta": theta,
                                   "rating": rescale(theta, top), "n_judged": n_j}))
    return pl.concat(parts)
