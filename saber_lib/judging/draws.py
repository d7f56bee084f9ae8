"""Rating draws: how uncertain each query's ratings are, given the judgments that made them.

For one query, the judgments (``tournament/judgments.parquet``: ``a`` shown first, ``outcome`` one
of ``a | b | tie | failure``) are redrawn ``n_draws`` times and Bradley-Terry is refitted on each
draw with the tournament's penalty (``alpha * sum theta^2``) and rescaled to ``[0, top]`` exactly
as the point ratings are. Failures never enter. Two ways to redraw (``method``):

``method="judgments"`` (default) - the nonparametric bootstrap over the query's own judgments:
    its non-failed judgments are resampled with replacement (as many as it has). This re-samples
    the design too (missing or doubled comparisons move the fitted strengths), so even a
    deterministic judge gets a spread after a finite tournament: the ratings are as uncertain as
    the judgments that made them.
``method="outcomes"`` - a parametric bootstrap that keeps the design (which pairs were judged, in
    which order, how often) and redraws the verdict of every decided judgment from the fitted
    model ``P(a wins) = sigmoid(kappa * (theta_a - theta_b))``, ``theta`` the query's penalized
    point fit and ``kappa`` the judge's sharpness, estimated once over all queries
    (:func:`judge_sharpness`; infinite when every query's verdicts agree with a total order, and
    then every draw reproduces the observed verdicts). Ties stay ties. This is judging noise
    conditional on the design; it reports a judge whose verdicts agree with one order as certain,
    and one tie anywhere makes every query's draws wide. The stopping rule uses it.

The draws are fitted by :func:`saber_lib.judging.bradley_terry.fit_bradley_terry` (one row of
comparison weights per draw) and rescaled by :func:`~saber_lib.judging.bradley_terry.rescale`.
"""
from __future__ import annotations

import math

import numpy as np
import polars as pl
from scipy import optimize
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from scipy.special import expit
from tqdm.auto import tqdm

from ..core.seeds import rng_for, stable_int
from ..metrics.resample import resample_counts
from .bradley_terry import fit_bradley_terry, rescale
from .outcomes import codes_of_labels, weighted_comparisons

METHODS = ("judgments", "outcomes")  # the first is the default


def _qrng(seed: int, key: str, stream: int = 0) -> np.random.Generator:
    """One query's stream of rating draws."""
    return rng_for(seed, stable_int(key, stream), stream)


def _progress(it, total, desc, show):
    return tqdm(it, total=total, desc=desc, leave=False) if show else it


# ============================================================================ one query
def win_graph_is_acyclic(n: int, a_idx, b_idx, codes) -> bool:
    """True when the verdicts agree with one total order: the win graph (an edge from winner to
    loser per decided judgment, both ways for a tie) has no cycle."""
    win, lose, _, _ = weighted_comparisons(a_idx, b_idx, codes, grouped=True)
    if win.size == 0:
        return True
    g = coo_matrix((np.ones(win.size), (win, lose)), shape=(n, n))
    return connected_components(g, directed=True, connection="strong")[0] == n


def _point_theta(n, a_idx, b_idx, codes, alpha):
    win, lose, wt, _ = weighted_comparisons(a_idx, b_idx, codes, grouped=True)
    return fit_bradley_terry(n, win, lose, alpha=alpha, weights=wt)


def calibrate_sharpness(margins, weights=None) -> float:
    """``kappa`` maximizing ``sum_k w_k log sigmoid(kappa * m_k)`` over ``kappa >= 0`` for the
    margins ``m_k = theta_winner - theta_loser`` of weighted comparisons: ``inf`` when no margin is
    negative (nothing contradicts the fitted order), 0 when the fitted order is no better than a
    coin (``sum w m <= 0``)."""
    m = np.asarray(margins, dtype=float)
    w = np.ones(m.size) if weights is None else np.asarray(weights, dtype=float)
    keep = (w > 0) & (m != 0)
    m, w = m[keep], w[keep]
    if not np.any(m < 0):
        return math.inf
    if w @ m <= 0:
        return 0.0

    def score(k):  # derivative of the log-likelihood, decreasing in k
        return float(w @ (m * expit(-k * m)))

    hi = 1.0
    while score(hi) > 0:
        hi *= 2.0
        if hi > 1e8:
            return math.inf
    return float(optimize.brentq(score, 0.0, hi, xtol=1e-10))


def judge_sharpness(judgments, ratings=None, alpha: float = 0.5) -> float:
    """The judge's sharpness ``kappa`` pooled over all queries: its verdicts are modelled as
    ``P(a wins) = sigmoid(kappa * (theta_a - theta_b))`` with ``theta`` each query's penalized
    point fit. ``inf`` when every query's verdicts agree with a total order (the joint likelihood of
    strengths and sharpness then has its supremum at an infinitely sharp judge); otherwise the
    maximum-likelihood ``kappa`` given the point fits (:func:`calibrate_sharpness`). Ties count as
    half a win each way (and as a cycle)."""
    cands = _candidates(judgments, ratings)
    margins, weights = [], []
    acyclic = True
    for q, g in judgments.filter(pl.col("outcome") != "failure").group_by(["query_id"]):
        q = q[0]
        idx = {c: i for i, c in enumerate(cands[q])}
        a = np.array([idx[x] for x in g["a"]], dtype=np.int64)
        b = np.array([idx[x] for x in g["b"]], dtype=np.int64)
        codes = np.array(codes_of_labels(g["outcome"]), dtype=np.int64)
        n = len(idx)
        acyclic &= win_graph_is_acyclic(n, a, b, codes)
        theta = _point_theta(n, a, b, codes, alpha)
        win, lose, wt, _ = weighted_comparisons(a, b, codes, grouped=True)
        margins.append(theta[win] - theta[lose])
        weights.append(wt)
    if acyclic:
        return math.inf
    return calibrate_sharpness(np.concatenate(margins), np.concatenate(weights))


def draws_for_query(n: int, a_idx, b_idx, codes, *, n_draws: int = 200, rng=None, alpha: float = 0.5,
                    top: float = 5.0, method: str = "judgments", sharpness: float = 1.0,
                    return_theta: bool = False) -> np.ndarray:
    """Rating draws ``(n_draws, n)`` of one query from its judgments given as candidate indices
    (``a_idx`` shown first) and verdict codes (:data:`~saber_lib.judging.outcomes.CODE_OF_LABEL`:
    1 a, -1 b, 0 tie; failures left out).

    ``method="judgments"`` (default): resample the judgments with replacement.
    ``method="outcomes"``: every decided verdict is redrawn with
    ``P(a wins) = sigmoid(sharpness * (theta_a - theta_b))`` (``theta``: the penalized point fit;
    ``sharpness=inf``: the observed verdicts, so all draws equal the data); ties stay ties.
    See the module docstring."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r} (expected one of {METHODS})")
    rng = rng if rng is not None else np.random.default_rng(0)
    codes = np.asarray(codes, dtype=np.int64)
    a_idx = np.asarray(a_idx, dtype=np.int64)
    b_idx = np.asarray(b_idx, dtype=np.int64)
    if codes.size == 0:
        return np.zeros((n_draws, n))
    theta = _point_theta(n, a_idx, b_idx, codes, alpha)
    if method == "judgments":
        win, lose, wt, row = weighted_comparisons(a_idx, b_idx, codes, grouped=True)
        counts = resample_counts(codes.size, codes.size, n_draws, rng)
        W = counts[:, row] * wt[None, :]
    else:
        dec = codes != 0
        tie = ~dec
        if math.isinf(sharpness):
            p = (codes[dec] == 1).astype(float)
        else:
            p = expit(sharpness * (theta[a_idx[dec]] - theta[b_idx[dec]]))
        # uniforms drawn judgment by judgment (rows), so that with the same generator a longer
        # history reuses the earlier judgments' uniforms (common random numbers across rounds)
        u = rng.random((int(dec.sum()), n_draws)).T
        y = (u < p[None, :]).astype(float)
        win = np.concatenate([a_idx[dec], b_idx[dec], a_idx[tie], b_idx[tie]])
        lose = np.concatenate([b_idx[dec], a_idx[dec], b_idx[tie], a_idx[tie]])
        W = np.concatenate([y, 1.0 - y, np.full((n_draws, 2 * int(tie.sum())), 0.5)], axis=1)
    theta = fit_bradley_terry(n, win, lose, alpha=alpha, weights=W, tol=1e-7, max_iter=100, theta0=theta)
    return theta if return_theta else rescale(theta, top)


# ============================================================================ tables
def _candidates(judgments, ratings) -> dict[str, list[str]]:
    if ratings is not None:
        cols = ["query_id", "cand_id"] + (["position"] if "position" in ratings.columns else [])
        r = ratings.select(cols)
        if "position" in cols:
            r = r.sort("query_id", "position")
        return {q: g["cand_id"].cast(pl.String).to_list()
                for (q,), g in r.group_by(["query_id"], maintain_order=True)}
    out: dict[str, list[str]] = {}
    for (q,), g in judgments.group_by(["query_id"], maintain_order=True):
        out[q] = sorted(set(g["a"].to_list()) | set(g["b"].to_list()))
    return out


def rating_draws(judgments, ratings=None, *, n_draws: int = 200, seed: int = 0, alpha: float = 0.5,
                 top: float = 5.0, method: str = "judgments", sharpness: float | None = None,
                 progress: bool = True) -> pl.DataFrame:
    """Rating draws of every query: ``query_id, cand_id, draw, rating`` (``draw`` = 0 .. n_draws-1).

    ``sharpness`` (method ``outcomes``): the judge's sharpness; None estimates it pooled over all
    queries (:func:`judge_sharpness`).

    ``judgments``: the columns of ``tournament/judgments.parquet``; ``ratings`` (optional, the
    columns of ``tournament/ratings.parquet``) fixes each query's candidate list (candidates never
    judged included); without it the judged candidates are used. Seeded per query (the draws of a
    query do not depend on the other queries)."""
    cands = _candidates(judgments, ratings)
    if method == "outcomes" and sharpness is None:
        sharpness = judge_sharpness(judgments, ratings, alpha) if judgments.height else math.inf
    by_q = {k[0]: g for k, g in judgments.group_by(["query_id"])} if judgments.height else {}
    parts = []
    for q, cids in _progress(cands.items(), len(cands), "rating draws", progress and len(cands) > 20):
        idx = {c: i for i, c in enumerate(cids)}
        g = by_q.get(q)
        if g is not None:
            g = g.filter(pl.col("outcome") != "failure")
            unknown = (set(g["a"]) | set(g["b"])) - set(idx)
            if unknown:
                raise ValueError(f"query {q!r}: judged candidates {sorted(unknown)[:3]} are not in its list")
            a = np.array([idx[x] for x in g["a"]], dtype=np.int64)
            b = np.array([idx[x] for x in g["b"]], dtype=np.int64)
            codes = np.array(codes_of_labels(g["outcome"]), dtype=np.int64)
        else:
            a = b = codes = np.zeros(0, dtype=np.int64)
        R = draws_for_query(len(cids), a, b, codes, n_draws=n_draws, rng=_qrng(seed, q), alpha=alpha,
                            top=top, method=method, sharpness=1.0 if sharpness is None else sharpness)
        parts.append(pl.DataFrame({
            "query_id": pl.Series([q] * R.size, dtype=pl.String),
            "cand_id": pl.Series(np.tile(np.array(cids, dtype=object), n_draws).tolist(), dtype=pl.String),
            "draw": pl.Series(np.repeat(np.arange(n_draws), len(cids)), dtype=pl.Int32),
            "rating": R.ravel(),
        }))
    if not parts:
        return pl.DataFrame(schema={"query_id": pl.String, "cand_id": pl.String, "draw": pl.Int32,
                                    "rating": pl.Float64})
    return pl.concat(parts)


def rating_se(draws) -> pl.DataFrame:
    """Per candidate: ``rating_mean`` and ``rating_se`` (standard deviation over the draws,
    ``ddof=1``; 0 with a single draw)."""
    return draws.group_by("query_id", "cand_id", maintain_order=True).agg(
        pl.col("rating").mean().alias("rating_mean"),
        pl.col("rating").std(ddof=1).fill_null(0.0).alias("rating_se"))


def ratings_with_se(ratings, draws) -> pl.DataFrame:
    """``ratings`` with a ``rating_se`` column from the draws (an error if a candidate has none)."""
    se = rating_se(draws).select("query_id", "cand_id", "rating_se")
    out = ratings.join(se, on=["query_id", "cand_id"], how="left", maintain_order="left")
    if out["rating_se"].null_count():
        bad = out.filter(pl.col("rating_se").is_null()).select("query_id", "cand_id").head(3).rows()
        raise ValueError(f"no rating draws for candidates, e.g. {bad}")
    return out
