"""Judging that stops when the evaluation is stable.

Each query's Swiss tournament is played round by round by the one round driver
(:func:`saber_lib.judging.rounds.play_rounds`, so a query that never stops is judged exactly as by
the plain Swiss tournament with the same seed), with a stopping hook that, after each round, asks whether more judgments of that query could still move the nDCG@k of any evaluated
retriever:

* draw ``n_draws`` rating vectors of the query from its judgments so far
  (:func:`saber_lib.judging.draws.draws_for_query`, parametric, design kept; the same
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

Judged on conclusions (:func:`compare_to_plain`): besides how far the systems' mean nDCG@k moved,
whether the stopped ratings keep the full tournament's system order and every pairwise difference
it finds significant (paired sign-flip test, Holm-adjusted, at the run's level), and with what
share of the judgments.

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
from ..core.progress import Progress

from ..metrics.ndcg import ndcg_at_k
from ..metrics.resample import holm, pair_indices, paired_differences, sign_flip_pvalues
from ..core.seeds import rng_for
from ..judging.draws import calibrate_sharpness, draws_for_query
from ..judging.outcomes import CODE_OF_LABEL, weighted_comparisons
from ..judging.rounds import play_rounds
from ..judging.schedules import Standing
from ..judging.bradley_terry import fit_bradley_terry, rescale
from ..judging.seeds import round_rng
from .invariance import normalize_outcome
from ..metrics.ndcg import ndcg_matrix, rankings

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
                        method="outcomes", sharpness=sharpness)
    nd = ndcg_matrix(R, order, k)  # (D, S)
    sd = nd.std(axis=0)
    sd[np.ptp(nd, axis=0) <= 1e-12] = 0.0
    return float(sd.max())


def batch_judge(judge, docs: Mapping[str, object]) -> Callable[[list], list]:
    """A batch judge for :func:`run_with_stopping` (``batch=True``) from an object with
    ``judge_pairs(items)`` (``saber_lib.judging.judge_base.Judge``) and the documents by id (e.g.
    ``saber_lib.judging.tournament.corpus_docs``): one ``judge_pairs`` call per round."""
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
        win, lose, wt, _ = weighted_comparisons(a, b, c, grouped=True)
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
    queries; :func:`batch_judge` wraps a ``saber_lib.judging.judge_base.Judge``). Outcomes ``a | b | tie |
    failure`` or the judges' ``1 | 2 | 0 | Failure``.
    ``scores``: the retrievers' scores, either a frame with the columns of
    ``evaluate/scores.parquet`` (every (retriever, setting) is one system) or a mapping
    ``query_id -> (S, n)`` array in the order of ``cand_ids[query_id]``.
    ``sharpness``: the judge model used for the draws: a number (default 1: the penalized fit's
    own probabilities, the plain parametric bootstrap; a judge's sharpness estimated on a finished
    run, :func:`saber_lib.judging.draws.judge_sharpness`, is the calibrated choice), or
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
                  "rounds": 0, "stopped_by": None, "spread": math.inf, "spreads": []} for q in query_ids}
    rows, hist = [], []
    bar = Progress("round", max_rounds, bar=progress, desc="rounds (stopping)")

    def judge_round(r, shown):
        ids = [(q, cand_ids[q][a], cand_ids[q][b]) for q, a, b in shown]
        if batch:
            verdicts = list(judge(ids)) if ids else []
            if len(verdicts) != len(ids):
                raise ValueError(f"the batch judge returned {len(verdicts)} verdicts for {len(ids)} pairs")
        else:
            verdicts = [judge(*x) for x in ids]
        labels = []
        for (q, a, b), (_, ca, cb), v in zip(shown, ids, verdicts):
            o = normalize_outcome(v)
            labels.append(o)
            rows.append((q, r, ca, cb, o, name, getattr(v, "reason", None) if o == "failure" else None))
            if o != "failure":
                st = states[q]
                st["a"].append(a)
                st["b"].append(b)
                st["codes"].append(CODE_OF_LABEL[o])
        return labels

    def rule_hook(r, active):
        if r >= max_rounds:
            return {q: "max_rounds" for q in active}
        if r < min_rounds:
            return {}
        if sharpness == "pooled":
            kappa = _pooled_sharpness(list(states.values()), alpha)
            kappa = fallback_sharpness if math.isinf(kappa) else kappa
        else:
            kappa = float(sharpness)
        stops = {}
        for q in active:
            st = states[q]
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
                stops[q] = "stable" if stable else "plateau"
        bar.update(1)
        return stops

    played = play_rounds(list(query_ids), {q: states[q]["standing"] for q in query_ids}, judge_round,
                         last_round=max_rounds, schedule="swiss", seed=seed, alpha=alpha, stop=rule_hook,
                         stop_without_pairs=True)
    for q in query_ids:
        states[q]["rounds"], states[q]["stopped_by"] = played.rounds[q], played.stopped_by[q]
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
        win, lose, wt, _ = weighted_comparisons(a, b, c, grouped=True)
        theta = fit_bradley_terry(n, win, lose, alpha=alpha, weights=wt)
        n_j = np.bincount(a, minlength=n) + np.bincount(b, minlength=n)
        parts.append(pl.DataFrame({"query_id": [q] * n, "cand_id": list(cand_ids[q]),
                                   "position": np.arange(n, dtype=np.int64), "theta": theta,
                                   "rating": rescale(theta, top), "n_judged": n_j.astype(np.int64)}))
    return pl.concat(parts)


def per_query_ndcg(ratings, scores, systems, k: int = 10) -> tuple[list, np.ndarray]:
    """nDCG@k of every system (rows, ``(retriever, setting)``) on every rated query (columns, in
    the order of ``ratings``) under one rating table."""
    by = {key: g for key, g in scores.group_by(["retriever", "setting", "query_id"])}
    rr = {q: g.sort("position") for (q,), g in ratings.group_by(["query_id"], maintain_order=True)}
    X = np.zeros((len(systems), len(rr)))
    for j, (q, g) in enumerate(rr.items()):
        for i, s in enumerate(systems):
            sc = dict(by[(s[0], s[1], q)].select("cand_id", "score").iter_rows())
            X[i, j] = ndcg_at_k(g["rating"].to_numpy(), np.array([sc[c] for c in g["cand_id"]]), k)
    return list(rr), X


def significant_pairs(X, alpha: float, n_permutations: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """The pairs ``(a < b)`` of systems (rows of ``X``, systems x queries) whose mean nDCG differs
    by the paired sign-flip test with Holm's adjustment over all pairs at ``alpha``: returns
    ``sign`` (per pair, +1 if a is better, -1 if b, 0 if not significant) and the adjusted p."""
    ia, ib = pair_indices(X.shape[0])
    D, _, n = paired_differences(X, ia, ib)
    p = holm(sign_flip_pvalues(D, n, n_permutations, rng))
    sign = np.where(p < alpha, np.sign(D.sum(axis=1)), 0.0)
    return sign, p


def compare_to_plain(stopped, plain, scores, *, k: int = 10, alpha: float = 0.05, n_permutations: int = 10_000,
                     seed: int = 0) -> dict:
    """System-level agreement of two rating tables on the same scores: per-system mean nDCG@k of
    both, ``kendall_tau`` between the two system orders, ``max_abs_change`` (largest change of any
    system's mean nDCG), ``same_order``, and the conclusions: ``significant_pairs`` (pairs the
    plain table separates by the paired sign-flip test, Holm-adjusted, at ``alpha``),
    ``significant_kept`` (of those, the pairs the stopped table separates in the same direction),
    ``new_significant`` (pairs only the stopped table separates) and ``conclusions_kept`` (same
    order and every significant difference kept). Both tables are tested on the same sign draws."""
    systems = scores.select("retriever", "setting").unique(maintain_order=True).rows()
    qs, Xs = per_query_ndcg(stopped, scores, systems, k)
    qp, Xp = per_query_ndcg(plain, scores, systems, k)
    if set(qs) != set(qp):
        raise ValueError("the stopped and the plain rating tables rate different queries")
    Xs = Xs[:, [qs.index(q) for q in qp]]
    means = {"stopped": Xs.mean(axis=1), "plain": Xp.mean(axis=1)}
    tau = float(kendalltau(means["stopped"], means["plain"]).statistic) if len(systems) > 1 else 1.0
    same = bool(np.array_equal(np.argsort(-means["stopped"], kind="stable"), np.argsort(-means["plain"], kind="stable")))
    sig_p, _ = significant_pairs(Xp, alpha, n_permutations, rng_for(seed, "stopping-conclusions"))
    sig_s, _ = significant_pairs(Xs, alpha, n_permutations, rng_for(seed, "stopping-conclusions"))
    n_sig = int((sig_p != 0).sum())
    kept = int(((sig_p != 0) & (sig_s == sig_p)).sum())
    return {"systems": systems, "mean_stopped": means["stopped"], "mean_plain": means["plain"],
            "kendall_tau": tau, "max_abs_change": float(np.max(np.abs(means["stopped"] - means["plain"]))),
            "same_order": same, "significant_pairs": n_sig, "significant_kept": kept,
            "new_significant": int(((sig_p == 0) & (sig_s != 0)).sum()),
            "conclusions_kept": bool(same and kept == n_sig)}
