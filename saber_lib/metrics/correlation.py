"""Correlations across systems (Spearman, Kendall's tau-b, Pearson) with a bootstrap interval that
resamples the systems.

The three coefficients are computed row by row on matrices (one row per resample), so thousands of
resamples of a few dozen systems are a few array operations:

* Pearson: the centred cross product over the product of the centred norms;
* Spearman: Pearson of the ranks, ties given their mean rank (``scipy.stats.rankdata``, ``average``);
* Kendall's tau-b: ``sum sign(dx) sign(dy) / sqrt(n_x n_y)`` over the pairs, ``n_x`` (``n_y``) the
  pairs not tied in x (y); the variant ``scipy.stats.kendalltau`` computes by default.

A row whose x or y is constant has no correlation (NaN). A resample draws as many systems as there
are, with replacement (:func:`saber_lib.metrics.resample.bootstrap_statistic`); a system drawn twice
ties with itself on both sides, which every coefficient above handles. The interval is the
percentile interval over the resamples with a defined value (their number is returned).
"""
from __future__ import annotations

import math

import numpy as np
from scipy import stats

from .resample import bootstrap_statistic, percentile_interval

COEFFICIENTS = ("spearman", "kendall", "pearson")
MIN_SYSTEMS = 3   # fewer systems: no correlation is reported (NaN)


def row_pearson(X, Y) -> np.ndarray:
    """Pearson's r of each row of ``X`` with the same row of ``Y`` (NaN where a row is constant)."""
    X, Y = np.atleast_2d(np.asarray(X, dtype=np.float64)), np.atleast_2d(np.asarray(Y, dtype=np.float64))
    Xc = X - X.mean(axis=1, keepdims=True)
    Yc = Y - Y.mean(axis=1, keepdims=True)
    den = np.sqrt((Xc * Xc).sum(axis=1) * (Yc * Yc).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (Xc * Yc).sum(axis=1) / den
    r[~(den > 1e-300)] = np.nan
    return np.clip(r, -1.0, 1.0)


def row_spearman(X, Y) -> np.ndarray:
    """Spearman's rho per row: Pearson's r of the average ranks."""
    return row_pearson(stats.rankdata(np.atleast_2d(X), axis=1), stats.rankdata(np.atleast_2d(Y), axis=1))


def row_kendall(X, Y) -> np.ndarray:
    """Kendall's tau-b per row (NaN where every pair is tied on one side)."""
    X, Y = np.atleast_2d(np.asarray(X, dtype=np.float64)), np.atleast_2d(np.asarray(Y, dtype=np.float64))
    i, j = np.triu_indices(X.shape[1], k=1)
    sx, sy = np.sign(X[:, i] - X[:, j]), np.sign(Y[:, i] - Y[:, j])
    den = np.sqrt(np.count_nonzero(sx, axis=1).astype(np.float64) * np.count_nonzero(sy, axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        t = (sx * sy).sum(axis=1) / den
    t[den == 0] = np.nan
    return t


ROW_FUNCTIONS = {"spearman": row_spearman, "kendall": row_kendall, "pearson": row_pearson}


def correlations_with_intervals(x, y, n_resamples: int, rng: np.random.Generator, level: float = 0.95,
                                coefficients=COEFFICIENTS) -> dict:
    """``n_systems``, each coefficient, its ``<name>_low`` / ``<name>_high`` percentile interval over
    ``n_resamples`` resamples of the systems (pairs ``(x[i], y[i])``), and ``n_resamples_defined``
    (resamples where every coefficient is defined). Fewer than :data:`MIN_SYSTEMS` pairs, or a
    constant side: NaN throughout."""
    x, y = np.asarray(x, dtype=np.float64).ravel(), np.asarray(y, dtype=np.float64).ravel()
    if x.shape != y.shape:
        raise ValueError(f"x has {x.size} values, y {y.size}")
    if np.isnan(x).any() or np.isnan(y).any():
        raise ValueError("correlation across systems: a value is NaN")
    out: dict = {"n_systems": int(x.size)}
    nan = {c: math.nan for c in coefficients} | {f"{c}_{e}": math.nan for c in coefficients for e in ("low", "high")}
    if x.size < MIN_SYSTEMS or np.all(x == x[0]) or np.all(y == y[0]):
        return out | nan | {"n_resamples_defined": 0}
    for c in coefficients:
        out[c] = float(ROW_FUNCTIONS[c](x[None, :], y[None, :])[0])

    def stat(idx):
        return np.column_stack([ROW_FUNCTIONS[c](x[idx], y[idx]) for c in coefficients])

    boots = bootstrap_statistic(x.size, stat, n_resamples, rng)
    ok = ~np.isnan(boots).any(axis=1)
    out["n_resamples_defined"] = int(ok.sum())
    for k, c in enumerate(coefficients):
        if ok.any():
            lo, hi = percentile_interval(boots[ok, k], level)
            out[f"{c}_low"], out[f"{c}_high"] = float(lo), float(hi)
        else:
            out[f"{c}_low"] = out[f"{c}_high"] = math.nan
    return out
