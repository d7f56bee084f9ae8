"""Bootstrap intervals, the paired sign-flip test, Holm's adjustment and compact letter displays.

Interval schemes (percentile bootstrap, 95% by default, quantiles by ``numpy.percentile``'s
linear interpolation):

``correct``
    Overall: resample the n scored queries n times with replacement. Per domain: resample the
    domain's n scored queries n times. This is the ordinary nonparametric bootstrap of a mean.
``authors``
    What the authors' published confidence files hold: 10,000 resamples; per domain 300 draws
    from the domain's scored queries whatever the domain's size (Geometry has 200 queries, so
    its interval is too narrow; Algebra 254, ...); overall, as many draws as the result file has
    queries, *scored or not* (1,000), from the scored ones. With every query scored (the shared
    files) the overall interval is the correct one; with missing queries it is too narrow.
    The authors drew with Python's ``random``; here the draws are numpy's, so intervals agree
    within resampling noise (about 1e-4), not bit for bit.

Every random quantity takes an explicit seed; the stream for one (system, task, scope) is
derived from the seed and the names (:func:`saber_lib.core.seeds.rng_for`), so adding a system changes no other
system's numbers.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..metrics.resample import (bootstrap_means, holm, pair_indices, paired_bootstrap_intervals,
                                paired_differences, percentile_interval, sign_flip_pvalues)
from ..core.seeds import rng_for

AUTHORS_RESAMPLES = 10_000
AUTHORS_DOMAIN_DRAWS = 300
SCHEMES = ("correct", "authors")


def n_draws(scheme: str, scope_is_overall: bool, n_scored: int, n_total: int) -> int:
    """Draws per resample under ``scheme`` (see the module docstring)."""
    if scheme == "correct":
        return n_scored
    if scheme == "authors":
        return n_total if scope_is_overall else AUTHORS_DOMAIN_DRAWS
    raise ValueError(f"unknown ci scheme {scheme!r} (expected one of {SCHEMES})")


def bootstrap_interval(values, scheme: str = "correct", overall: bool = True, n_resamples: int | None = None,
                       seed: int = 0, keys: Sequence[str] = (), level: float = 0.95) -> dict:
    """Mean and percentile-bootstrap interval of the scored (non-NaN) entries of ``values``.

    ``values`` is the scope's whole array (NaN = not scored): its length is the ``n_total`` the
    ``authors`` scheme draws overall. ``overall`` says whether the scope is ``Overall`` (else a
    domain). Returns ``mean``, ``ci_low``, ``ci_high``, ``boot_mean`` (mean of the resample
    means), ``n_queries`` (scored), ``n_missing``, ``n_draws``.
    """
    return bootstrap_intervals(np.asarray(values, dtype=np.float64)[None, :], scheme, overall, n_resamples,
                               seed, keys, level)[0]


def bootstrap_intervals(X, scheme: str = "correct", overall: bool = True, n_resamples: int | None = None,
                        seed: int = 0, keys: Sequence[str] = (), level: float = 0.95) -> list[dict]:
    """:func:`bootstrap_interval` for every row (system) of ``X`` (systems x the scope's queries).

    Systems that scored the same queries share the resampled queries (one matrix product per
    group); the stream of a group depends on the seed, ``keys`` and the set of its queries only,
    so one system's interval does not depend on which other systems are ranked.
    """
    X = np.atleast_2d(np.asarray(X, dtype=np.float64))
    n_res = int(n_resamples or AUTHORS_RESAMPLES)
    out: list[dict] = [{} for _ in range(X.shape[0])]
    ok = ~np.isnan(X)
    groups: dict[bytes, list[int]] = {}
    for i in range(X.shape[0]):
        groups.setdefault(np.packbits(ok[i]).tobytes(), []).append(i)
    for pattern, rows in groups.items():
        cols = np.flatnonzero(ok[rows[0]])
        base = {"n_queries": int(cols.size), "n_missing": int(X.shape[1] - cols.size)}
        if cols.size == 0:
            for i in rows:
                out[i] = {**base, "mean": math.nan, "ci_low": math.nan, "ci_high": math.nan,
                          "boot_mean": math.nan, "n_draws": 0}
            continue
        m = n_draws(scheme, overall, cols.size, X.shape[1])
        full = cols.size == X.shape[1]
        rng = rng_for(seed, scheme, *keys, *(() if full else (pattern.hex(),)))
        V = X[np.ix_(rows, cols)]
        boots = bootstrap_means(V, m, n_res, rng)
        low, high = percentile_interval(boots, level)
        for j, i in enumerate(rows):
            out[i] = {**base, "mean": float(np.mean(V[j])), "ci_low": float(low[j]), "ci_high": float(high[j]),
                      "boot_mean": float(boots[:, j].mean()), "n_draws": int(m)}
    return out


# ----------------------------------------------------------------------------- paired tests
def pairwise_tests(X: np.ndarray, names: Sequence[str], n_resamples: int = 10_000, seed: int = 0,
                   keys: Sequence[str] = (), level: float = 0.95, progress: bool = False) -> dict:
    """Every pair of systems (rows of ``X``): mean difference a - b on the queries both scored,
    sign-flip p-value, Holm-adjusted p-value over all pairs, paired bootstrap interval.

    Returns a dict of equal-length lists/arrays: ``a``, ``b``, ``n_common``, ``mean_diff``,
    ``diff_low``, ``diff_high``, ``p_value``, ``p_adjusted``.
    """
    X = np.asarray(X, dtype=np.float64)
    ia, ib = pair_indices(X.shape[0])
    D, both, n = paired_differences(X, ia, ib)
    with np.errstate(invalid="ignore", divide="ignore"):
        md = D.sum(axis=1) / n
    p = sign_flip_pvalues(D, n, n_resamples, rng_for(seed, "sign-flip", *keys), progress=progress)
    lo, hi = paired_bootstrap_intervals(D, both, n_resamples, rng_for(seed, "paired-bootstrap", *keys), level)
    return {"a": [names[i] for i in ia], "b": [names[i] for i in ib], "n_common": n.astype(np.int64),
            "mean_diff": md, "diff_low": lo, "diff_high": hi, "p_value": p, "p_adjusted": holm(p)}


# ----------------------------------------------------------------------------- letters
def compact_letters(names: Sequence[str], means: Sequence[float], different: set[frozenset]) -> dict[str, str]:
    """Compact letter display: systems sharing a letter are not significantly different.

    ``different`` holds the significantly different pairs (as frozensets of two names). The groups
    are the maximal sets of systems no two of which differ: the maximal cliques of the graph of the
    not-different pairs (``networkx.find_cliques``), the groups the insert-absorb procedure
    (Piepho 2004) ends with. Then two systems share a letter exactly when they are not
    significantly different. Letters go to groups in order of their best mean ("a" = best).
    Insert-absorb builds them one significant pair at a time and compares every group with every
    other at each step: with 50 systems and the ~600 significant pairs of 300 queries it ran for
    minutes; the clique search takes milliseconds.
    """
    import networkx as nx  # only the letters need it (kept off the command line's start)

    names = list(names)
    g = nx.complete_graph(names)
    g.remove_edges_from(tuple(p) for p in different if len(p) == 2)
    groups = [frozenset(c) for c in nx.find_cliques(g)]
    mean = dict(zip(names, means))
    rank = {n: i for i, n in enumerate(sorted(names, key=lambda n: -mean[n]))}
    groups.sort(key=lambda g: sorted(rank[n] for n in g))
    letters = "abcdefghijklmnopqrstuvwxyz"
    out = {n: "" for n in names}
    for i, g in enumerate(groups):
        tag = letters[i] if i < 26 else f"[{i}]"
        for n in sorted(g, key=rank.get):
            out[n] += tag
    return out
