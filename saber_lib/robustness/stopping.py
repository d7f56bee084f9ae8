"""Judging that stops when the evaluation is stable.

A driver that plays each query's Swiss tournament round by round (the pairs and the order shown
are those of ``saber_lib.tournament``: ``next_pairs("swiss", ...)`` with ``round_rng``, so a query
that never stops is judged exactly as by the plain Swiss schedule with the same seed) and, after
each round, asks whether more judgments of that query could still move the nDCG@k of any evaluated
retriever:

* draw ``n_draws`` rating vectors of the query from its judgments so far
  (:func:`saber_lib.robustness.uncertainty.draws_for_query`, parametric, design kept; the same
  generator every round, so the spreads of successive rounds share their random numbers);
* for every retriever, its nDCG@k under every draw (the retriever's ranking is fixed by its scores,
  so what moves is the ratings of its top k and of the ideal top k);
* ``spread`` = the largest, over retrievers, standard deviation of that nDCG over the draws.

Rules (``rule``):

``"stable"``  stop once ``spread <= tol``: the ratings that decide nDCG@k are settled for every
              retriever (with ``tol = 0`` this is "the nDCG of every retriever is the same under
              every draw", i.e. the top-k sets and orders cannot change);
``"plateau"`` stop once the spread no longer shrinks: ``spread > (1 - min_shrink) * spread`` of
              ``window`` rounds before (more judgments no longer narrow the query's nDCG interval);
``"either"``  the first of the two.

Bounds: a query is never stopped before ``min_rounds`` (at least 1: one full Swiss round) and never
judged beyond ``max_rounds`` (R); a query whose Swiss round has no legal pair left also ends.
The judge is any callable ``judge(query_id, a_id, b_id) -> 'a' | 'b' | 'tie' | 'failure'``
(``a_id`` shown first).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np
import polars as pl
from scipy.stats import kendalltau
from tqdm.auto import tqdm

from ..evaluate import ndcg_at_k
from ..tournament import Standing, fit_bradley_terry, next_pairs, rescale, round_rng
from .invariance import normalize_outcome
from .uncertainty import CODE, calibrate_sharpness, comparisons, draws_for_query, ndcg_matrix, rankings

RULES = ("stable", "plateau", "either")


@dataclass
class StoppingResult:
    judgments: pl.DataFrame   # query_id, round, a, b, outcome, judge, reason
    ratings: pl.DataFrame     # query_id, cand_id, position, theta, rating, n_judged
    rounds: pl.DataFrame      # query_id, rounds, judgments, stopped_by, last_spread
    history: pl.DataFrame     # query_id, round, spread (one row per check)

    @property
    def n_judgments(self) -> int:
        return self.judgments.height


def _score_matrix(scores, query_ids, cand_ids, k):
    """Per query, the rankings ``(S, n)`` of the retrievers (systems = (retriever, setting))."""
    if isinstance(scores, pl.DataFrame):
        systems = scores.select("retriever", "setting").unique(maintain_order=True).rows()
        sidx = {s: i for i, s in enumerate(systems)}
        by_q = {q: g for (q,), g in scores.group_by(["query_id"])}
        out = {}
        for q in query_ids:
            pos = {c: i for i, c in enumerate(cand_ids[q])}
            M = np.full((len(systems), len(pos)), np.nan)
            g = by_q.get(q)
            if g is None:
                raise ValueError(f"no scores for query {q!r}")
            for r, s, c, v in g.select("retriever", "setting", "cand_id", "score").iter_rows():
                if c in pos:
                    M[sidx[(r, s)], pos[c]] = v
            if np.isnan(M).any():
                raise ValueError(f"query {q!r}: a candidate lacks a score from some retriever")
            out[q] = rankings(M)
        return out
    # mapping: query -> (S, n) score array in candidate order
    return {q: rankings(np.atleast_2d(np.asarray(scores[q], dtype=float))) for q in query_ids}


def query_spread(n: int, a_idx, b_idx, codes, order, *, k: int = 10, n_draws: int = 64, rng=None,
                 alpha: float = 0.5, top: float = 5.0, sharpness: float = 1.0) -> float:
    """The largest, over retrievers (rows of ``order``), standard deviation of nDCG@k over rating
    draws of one query (0 when the query has no judgment yet is meaningless: returns inf)."""
    if len(codes) == 0:
        return math.inf
    R = draws_for_query(n, a_idx, b_idx, codes, n_draws=n_draws, rng=rng, alpha=alpha, top=top,
                        sharpness=sharpness)
    nd = ndcg_matrix(R, order, k)  # (D, S)
    sd = nd.std(axis=0)
    sd[np.ptp(nd, axis=0) <= 1e-12] = 0.0
    return float(sd.max())


def batch_judge(judge, docs: Mapping[str, object]) -> Callable[[list], list]:
    """A batch judge for :func:`run_with_stopping` (``batch=True``) from an object with
    ``judge_pairs(items)`` (``saber_lib.judging.judges.Judge``) and the documents by id (e.g.
    ``saber_lib.tournament.corpus_docs``): one ``judge_pairs`` call per round."""
    def run(triples):
        return judge.judge_pairs([(docs[q], docs[a], docs[b]) for q, a, b in triples])

    run.name = getattr(judge, "name", "judge")
    return run


def _pooled_sharpness(states, alpha):
    margins, weights = [], []
    for st in states:
        if not st["codes"]:
            continue
        a, b, c = (np.array(st[x], dtype=np.int64) for x in ("a", "b", "codes"))
        win, lose, wt, _ = comparisons(a, b, c)
        theta = fit_bradley_terry(st["n"], win, lose, alpha=alpha, weights=wt)
        margins.append(theta[win] - theta[lose])
        weights.append(wt)
    if not margins:
        return math.inf
    return calibrate_sharpness(np.concatenate(margins), np.concatenate(weights))


def run_with_stopping(query_ids: Sequence[str], cand_ids: Mapping[str, Sequence[str]],
                      judge: Callable[[str, str, str], str], scores, *, max_rounds: int = 20,
                      min_rounds: int = 1, rule: str = "either", tol: float = 0.01, min_shrink: float = 0.05,
                      window: int = 3,
                      k: int = 10, n_draws: int = 64, sharpness: float | str = 1.0,
                      fallback_sharpness: float = 1.0, alpha: float = 0.5, top: float = 5.0, seed: int = 0,
                      judge_name: str | None = None, batch: bool = False, progress: bool = True) -> StoppingResult:
    """Play Swiss rounds per query until the rule stops it (module docstring).

    ``judge``: ``judge(query_id, a_id, b_id) -> outcome``, or with ``batch=True`` a function of a
    list of such triples returning one outcome each (called once per round for all active
    queries; :func:`batch_judge` wraps a ``saber_lib.judging.judges.Judge``). Outcomes ``a | b | tie |
    failure`` or the judges' ``1 | 2 | 0 | Failure``.
    ``scores``: the retrievers' scores, either a frame with the columns of
    ``evaluate/scores.parquet`` (every (retriever, setting) is one system) or a mapping
    ``query_id -> (S, n)`` array in the order of ``cand_ids[query_id]``.
    ``sharpness``: the judge model used for the draws: a number (default 1: the penalized fit's
    own probabilities, the plain parametric bootstrap; a judge's sharpness estimated on a finished
    run, :func:`saber_lib.robustness.uncertainty.judge_sharpness`, is the calibrated choice), or
    ``"pooled"`` to estimate it after each round from all queries' judgments so far, with
    ``fallback_sharpness`` while no verdict contradicts the fitted order. Early rounds hold few
    cycles, so the pooled estimate is then too sharp and stops queries too early (see
    ``benchmarks/bench_stopping.py``).
    """
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r} (expected one of {RULES})")
    if max_rounds < 1:
        raise ValueError("max_rounds must be >= 1")
    min_rounds = max(1, int(min_rounds))
    if min_rounds > max_rounds:
        raise ValueError("min_rounds exceeds max_rounds")
    orders = _score_matrix(scores, query_ids, cand_ids, k)
    name = judge_name or getattr(judge, "name", None) or "judge"
    states = {q: {"n": len(cand_ids[q]), "standing": Standing(len(cand_ids[q])), "a": [], "b": [], "codes": [],
                  "active": True, "rounds": 0, "stopped_by": None, "spread": math.inf, "spreads": []} for q in query_ids}
    rows, hist = [], []
    bar = None
    if progress:
        bar = tqdm(total=max_rounds, desc="rounds (stopping)", leave=False)
    for r in range(1, max_rounds + 1):
        active = [q for q in query_ids if states[q]["active"]]
        if not active:
            break
        todo = []  # (query, a index, b index) of this round, all queries together
        for q in active:
            st = states[q]
            stand = st["standing"]
            stand.rounds_done = r - 1
            pairs = next_pairs("swiss", stand, round_rng(seed, q, r), alpha)
            if not pairs:
                st["active"], st["stopped_by"] = False, "no pairs left"
                continue
            flip = round_rng(seed, q, r, stream=1).random(len(pairs)) < 0.5
            todo += [(q, j, i) if f else (q, i, j) for (i, j), f in zip(pairs, flip)]
            st["rounds"] = r
        ids = [(q, cand_ids[q][a], cand_ids[q][b]) for q, a, b in todo]
        if batch:
            verdicts = list(judge(ids)) if ids else []
            if len(verdicts) != len(ids):
                raise ValueError(f"the batch judge returned {len(verdicts)} verdicts for {len(ids)} pairs")
        else:
            verdicts = [judge(*x) for x in ids]
        for (q, a, b), (_, ca, cb), v in zip(todo, ids, verdicts):
            o = normalize_outcome(v)
            st = states[q]
            st["standing"].record(a, b, o)
            rows.append((q, r, ca, cb, o, name, getattr(v, "reason", None) if o == "failure" else None))
            if o != "failure":
                st["a"].append(a)
                st["b"].append(b)
                st["codes"].append(CODE[o])
        if r >= max_rounds:
            for q in active:
                if states[q]["active"]:
                    states[q]["active"], states[q]["stopped_by"] = False, "max_rounds"
            break
        if r < min_rounds:
            continue
        if sharpness == "pooled":
            kappa = _pooled_sharpness(list(states.values()), alpha)
            kappa = fallback_sharpness if math.isinf(kappa) else kappa
        else:
            kappa = float(sharpness)
        for q in active:
            st = states[q]
            if not st["active"]:
                continue
            rng = round_rng(seed, q, 0, stream=2)
            sp = query_spread(st["n"], st["a"], st["b"], st["codes"], orders[q], k=k, n_draws=n_draws, rng=rng,
                              alpha=alpha, top=top, sharpness=kappa)
            hist.append((q, r, sp))
            stable = sp <= tol
            past = st["spreads"]
            plateau = len(past) >= window and math.isfinite(past[-window]) and sp > (1.0 - min_shrink) * past[-window]
            past.append(sp)
            st["spread"] = sp
            if (rule in ("stable", "either") and stable) or (rule in ("plateau", "either") and plateau):
                st["active"], st["stopped_by"] = False, "stable" if stable else "plateau"
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    judgments = pl.DataFrame(rows, schema={"query_id": pl.String, "round": pl.Int32, "a": pl.String, "b": pl.String,
                                           "outcome": pl.String, "judge": pl.String, "reason": pl.String},
                             orient="row")
    ratings = _ratings(query_ids, cand_ids, states, alpha, top)
    per_q = pl.DataFrame([(q, states[q]["rounds"], states[q]["standing"].n_judgments, states[q]["stopped_by"],
                           states[q]["spread"]) for q in query_ids],
                         schema={"query_id": pl.String, "rounds": pl.Int32, "judgments": pl.Int64,
                                 "stopped_by": pl.String, "last_spread": pl.Float64}, orient="row")
    history = pl.DataFrame(hist, schema={"query_id": pl.String, "round": pl.Int32, "spread": pl.Float64},
                           orient="row")
    return StoppingResult(judgments, ratings, per_q, history)


def _ratings(query_ids, cand_ids, states, alpha, top):
    parts = []
    for q in query_ids:
        st = states[q]
        n = st["n"]
        a, b, c = (np.array(st[x], dtype=np.int64) for x in ("a", "b", "codes"))
        win, lose, wt, _ = comparisons(a, b, c)
        theta = fit_bradley_terry(n, win, lose, alpha=alpha, weights=wt)
        n_j = np.bincount(a, minlength=n) + np.bincount(b, minlength=n)
        parts.append(pl.DataFrame({"query_id": [q] * n, "cand_id": list(cand_ids[q]),
                                   "position": np.arange(n, dtype=np.int64), "theta": theta,
                                   "rating": rescale(theta, top), "n_judged": n_j.astype(np.int64)}))
    return pl.concat(parts)


def compare_to_plain(stopped, plain, scores, *, k: int = 10) -> dict:
    """System-level agreement of two rating tables on the same scores: per-system mean nDCG@k of
    both, ``kendall_tau`` between the two system orders, ``max_abs_change`` (largest change of any
    system's mean nDCG) and ``same_order``."""
    systems = scores.select("retriever", "setting").unique(maintain_order=True).rows()
    by = {key: g for key, g in scores.group_by(["retriever", "setting", "query_id"])}
    means = {}
    for name, rt in (("stopped", stopped), ("plain", plain)):
        rr = {q: g.sort("position") for (q,), g in rt.group_by(["query_id"])}
        vals = []
        for s in systems:
            v = []
            for q, g in rr.items():
                sc = dict(by[(s[0], s[1], q)].select("cand_id", "score").iter_rows())
                v.append(ndcg_at_k(g["rating"].to_numpy(), np.array([sc[c] for c in g["cand_id"]]), k))
            vals.append(float(np.mean(v)))
        means[name] = np.array(vals)
    tau = float(kendalltau(means["stopped"], means["plain"]).statistic) if len(systems) > 1 else 1.0
    return {"systems": systems, "mean_stopped": means["stopped"], "mean_plain": means["plain"],
            "kendall_tau": tau, "max_abs_change": float(np.max(np.abs(means["stopped"] - means["plain"]))),
            "same_order": bool(np.array_equal(np.argsort(-means["stopped"], kind="stable"),
                                              np.argsort(-means["plain"], kind="stable")))}
