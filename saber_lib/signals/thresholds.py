"""Thresholds on the pair signals (paper 3.4, App. B.3).

Categories of a candidate ``c`` of query ``q`` at thresholds ``(tau_topic, tau_summ)``::

    topic-only:    sim_topic >  tau_topic  and  sim_summ <= tau_summ
    summary-only:  sim_topic <= tau_topic  and  sim_summ >  tau_summ
    both:          sim_topic >  tau_topic  and  sim_summ >  tau_summ

A query is *eligible* at ``(tau_topic, tau_summ, K)`` when each category holds at least ``K``
candidates. Thresholds are searched on the histogram grid ``tau = i / B`` (``B = hist_bins``), where
the counts are exact (see :mod:`saber_lib.signals.store`): with ``R_q[i, j] = #{c : bin_topic > i-1,
bin_summ > j-1}`` (a 2-D suffix sum of the query's joint histogram) ``both = R_q[i+1, j+1]``,
``topic-only = R_q[i+1, 0] - both``, ``summary-only = R_q[0, j+1] - both``.

Rules (``threshold_rule``):

* ``paper`` (App. B.3): per domain ``d`` the feasible set ``F_d = {(i, j) : E_d(i, j) >= Q_min}``,
  ``E_d`` = eligible queries of domain ``d``, restricted to thresholds at or above the pair floors
  (pairs below them are not stored, so they could not be selected). The domain's threshold pair is
  the smallest point of ``F_d`` in the search order ``threshold_search``: ``topic_first`` takes
  the smallest ``tau_topic`` for which some ``tau_summ`` is feasible, then the smallest such
  ``tau_summ`` (``summ_first`` swaps the roles). The final thresholds are the minimum over the
  domains, signal by signal (the appendix: "we took the minimal thresholds obtained across the
  five domains"). A domain with an empty ``F_d`` contributes the point where ``E_d`` is largest and
  is reported as infeasible, with the feasible frontier, instead of failing.
* ``strictest``: the same feasible sets ``F_d``, but each domain takes its *largest* point in the
  search order (the highest ``tau_topic`` at which some ``tau_summ`` is feasible, then the highest
  such ``tau_summ``), i.e. the strictest relevance thresholds that still give ``Q_min`` eligible
  queries; final = minimum over domains, so every domain stays feasible. The appendix's wording
  ("minimal threshold for which at least 150 queries had at least 50 candidates above it") taken
  literally is ``paper``, which on this corpus lands on the pair floors; its reported values
  (0.858 / 0.211) are strict ones, which this reading reproduces in spirit.
* ``quantile`` (the authors' code): per domain the ``threshold_quantile`` quantile of all pair
  values of its queries, signal by signal (at histogram resolution: the smallest edge whose
  cumulative share reaches the quantile); final = minimum over domains.
* ``fixed``: the profile's ``tau_topic`` and ``tau_summ``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from .store import SignalStore, bin_edges

GROUPS = ("topic-only", "summary-only", "both")
DEFAULT_K_LADDER = (1, 2, 3, 5, 10, 20, 30, 50, 75, 100, 150, 200)


# ----------------------------------------------------------------------------- domain lookup
def domain_masks(query_domains, domains) -> np.ndarray:
    """Boolean ``(len(domains), N)``: query ``q`` belongs to domain ``d`` (multi-label)."""
    m = np.zeros((len(domains), len(query_domains)), dtype=bool)
    pos = {d: k for k, d in enumerate(domains)}
    for q, ds in enumerate(query_domains):
        for d in ds or ():
            if d in pos:
                m[pos[d], q] = True
    return m


# ----------------------------------------------------------------------------- histogram sweeps
def suffix_counts(hist: np.ndarray) -> np.ndarray:
    """``R[..., i, j] = sum_{a >= i, b >= j} hist[..., a, b]``, padded with a zero last row/col."""
    r = np.flip(np.cumsum(np.cumsum(np.flip(hist, (-2, -1)), -2), -1), (-2, -1))
    pad = [(0, 0)] * (r.ndim - 2) + [(0, 1), (0, 1)]
    return np.pad(r, pad)


def category_counts_grid(hist: np.ndarray):
    """(topic-only, summary-only, both) on the whole grid: arrays ``[..., i, j]`` for ``tau = edge_i, edge_j``."""
    r = suffix_counts(hist)
    both = r[..., 1:, 1:]
    topic_gt = r[..., 1:, :1]
    summ_gt = r[..., :1, 1:]
    return topic_gt - both, summ_gt - both, both


def _dense_hists(store: SignalStore, q0: int, q1: int) -> np.ndarray:
    nb1 = store.hist_bins + 1
    a, b = int(store.hist_offsets[q0]), int(store.hist_offsets[q1])
    lens = np.diff(np.asarray(store.hist_offsets[q0:q1 + 1]))
    qs = np.repeat(np.arange(q1 - q0), lens)
    h = np.zeros((q1 - q0) * nb1 * nb1, dtype=np.int64)
    h[qs * nb1 * nb1 + np.asarray(store.hist_cells[a:b], np.int64)] = np.asarray(store.hist_counts[a:b])
    return h.reshape(q1 - q0, nb1, nb1)


@dataclass
class GridSweep:
    """Per-domain sums over the threshold grid, from the histograms alone.

    ``eligible[k][d, i, j]``: queries of domain ``d`` with at least ``K_ladder[k]`` candidates in each
    category at ``(edge_i, edge_j)``; ``marg_topic[d, b]``, ``marg_summ[d, b]``: pair counts per bin.
    """

    domains: list
    k_ladder: np.ndarray
    eligible: np.ndarray      # (len(K_ladder), D, B+1, B+1) int64
    marg_topic: np.ndarray    # (D, B+1)
    marg_summ: np.ndarray     # (D, B+1)
    n_queries: np.ndarray     # (D,) queries per domain
    edges: np.ndarray

    def k_index(self, k: int) -> int:
        hit = np.flatnonzero(self.k_ladder == k)
        if not len(hit):
            raise KeyError(f"K={k} is not in the sweep's ladder {self.k_ladder.tolist()}")
        return int(hit[0])


def sweep(store: SignalStore, query_domains, domains, k_values=(), usable=None, chunk: int = 128) -> GridSweep:
    """One pass over all queries' histograms: eligible-query counts for every grid point and K.

    ``usable``: optional boolean per row; queries that are not usable are skipped (their
    candidates still count: histograms hold every pair).
    """
    ladder = np.array(sorted(set(DEFAULT_K_LADDER) | {int(k) for k in k_values}), dtype=np.int64)
    dm = domain_masks(query_domains, domains)
    if usable is not None:
        dm &= np.asarray(usable, bool)[None, :]
    nb1 = store.hist_bins + 1
    D = len(domains)
    L = len(ladder)
    # per domain and grid cell, how many queries reach exactly level l (the l smallest K of the ladder
    # and no more); one pass a chunk instead of one comparison and product per K
    levels = np.zeros((D, nb1 * nb1 * (L + 1)), dtype=np.int64)
    cell_base = np.arange(nb1 * nb1, dtype=np.int64) * (L + 1)
    mt = np.zeros((D, nb1), dtype=np.int64)
    ms = np.zeros((D, nb1), dtype=np.int64)
    any_dom = dm.any(axis=0)
    for q0 in range(0, store.n_docs, chunk):
        q1 = min(store.n_docs, q0 + chunk)
        if not any_dom[q0:q1].any():
            continue
        h = _dense_hists(store, q0, q1)
        to, so, bo = category_counts_grid(h)
        mins = np.minimum(np.minimum(to, so), bo)        # (c, B+1, B+1)
        code = cell_base + np.searchsorted(ladder, mins.reshape(q1 - q0, -1), side="right")
        for d in range(D):
            rows = np.flatnonzero(dm[d, q0:q1])
            if len(rows):
                levels[d] += np.bincount(code[rows].ravel(), minlength=levels.shape[1])
        wi = dm[:, q0:q1].astype(np.int64)
        mt += wi @ h.sum(axis=2)
        ms += wi @ h.sum(axis=1)
    at_least = np.flip(np.cumsum(np.flip(levels.reshape(D, nb1, nb1, L + 1), -1), -1), -1)
    elig = np.ascontiguousarray(np.moveaxis(at_least[..., 1:], -1, 0))   # K_ladder[k] reached: level > k
    return GridSweep(domains=list(domains), k_ladder=ladder, eligible=elig, marg_topic=mt, marg_summ=ms,
                     n_queries=dm.sum(axis=1), edges=bin_edges(store.hist_bins))


# ----------------------------------------------------------------------------- threshold rules
def _first_point(feasible: np.ndarray, order: str, last: bool = False):
    """Smallest (``last``: largest) grid point of a boolean (B+1, B+1) mask in the search order."""
    if not feasible.any():
        return None
    pick = -1 if last else 0
    if order == "summ_first":
        j = int(np.flatnonzero(feasible.any(axis=0))[pick])
        i = int(np.flatnonzero(feasible[:, j])[pick])
    else:
        i = int(np.flatnonzero(feasible.any(axis=1))[pick])
        j = int(np.flatnonzero(feasible[i])[pick])
    return i, j


def _quantile_edge(marg: np.ndarray, q: float, edges: np.ndarray) -> float | None:
    tot = marg.sum()
    if tot == 0:
        return None
    cdf = np.cumsum(marg) / tot
    return float(edges[int(np.searchsorted(cdf, q - 1e-12, side="left"))])


def find_thresholds(sw: GridSweep, *, K: int, Q_min: int, rule: str = "paper", quantile: float = 0.99,
                    tau_topic: float | None = None, tau_summ: float | None = None,
                    floor_topic: float = 0.0, floor_summ: float = 0.0,
                    order: str = "topic_first") -> dict:
    """Thresholds by ``rule`` (module docstring), with per-domain values and the feasible frontier."""
    edges = sw.edges
    k = sw.k_index(K)
    allowed = (edges[:, None] >= floor_topic - 1e-12) & (edges[None, :] >= floor_summ - 1e-12)
    per_domain = {}
    for d, name in enumerate(sw.domains):
        e = sw.eligible[k, d]
        info = {"n_queries": int(sw.n_queries[d])}
        if rule in ("paper", "strictest"):
            last = rule == "strictest"
            pt = _first_point((e >= Q_min) & allowed, order, last)
            info["feasible"] = pt is not None
            if pt is None:  # best effort: the allowed point with the most eligible queries
                masked = np.where(allowed, e, -1)
                best = masked.max()
                pt = _first_point(masked == best, order, last) if best > 0 else None
            if pt is not None:
                info.update(tau_topic=float(edges[pt[0]]), tau_summ=float(edges[pt[1]]),
                            eligible=int(e[pt]))
        elif rule == "quantile":
            info.update(tau_topic=_quantile_edge(sw.marg_topic[d], quantile, edges),
                        tau_summ=_quantile_edge(sw.marg_summ[d], quantile, edges))
        per_domain[name] = info
    if rule == "fixed":
        if tau_topic is None or tau_summ is None:
            raise ValueError("thresholds.tau_topic and thresholds.tau_summ must be set for rule 'fixed'")
        final_t, final_s = float(tau_topic), float(tau_summ)
    else:
        ts = [v["tau_topic"] for v in per_domain.values() if v.get("tau_topic") is not None]
        ss = [v["tau_summ"] for v in per_domain.values() if v.get("tau_summ") is not None]
        # no domain has a single eligible query anywhere: report (frontier) instead of raising
        final_t = float(min(ts)) if ts else None
        final_s = float(min(ss)) if ss else None
    # eligibility at the final thresholds (grid point at or just above them)
    i = int(np.searchsorted(edges, (final_t or 0.0) - 1e-12))
    j = int(np.searchsorted(edges, (final_s or 0.0) - 1e-12))
    on_grid = bool(final_t is not None and final_s is not None and i < len(edges) and j < len(edges) and abs(edges[min(i, len(edges) - 1)] - final_t) < 1e-9
                   and abs(edges[min(j, len(edges) - 1)] - final_s) < 1e-9)
    for d, name in enumerate(sw.domains):
        if on_grid:
            per_domain[name]["eligible_at_final"] = int(sw.eligible[k, d, i, j])
    feasible_final = bool(on_grid and all(sw.eligible[k, d, i, j] >= Q_min for d in range(len(sw.domains))))
    return {"tau_topic": final_t, "tau_summ": final_s, "K": int(K), "Q_min": int(Q_min), "rule": rule,
            "search_order": order, "threshold_quantile": quantile, "hist_bins": len(edges) - 1,
            "pair_floor_topic": floor_topic, "pair_floor_summ": floor_summ,
            "feasible": bool(rule not in ("paper", "strictest") or all(v["feasible"] for v in per_domain.values())),
            "all_domains_reach_Q_min_at_final": feasible_final,
            "per_domain": per_domain, "frontier": frontier(sw, floor_topic, floor_summ)}


def frontier(sw: GridSweep, floor_topic: float = 0.0, floor_summ: float = 0.0) -> dict:
    """Per domain and K (ladder): the most eligible queries at any allowed grid point, and where.

    Read it as "with K candidates per category, at most Q queries of this domain are eligible";
    the largest K with Q >= Q_min is the largest feasible K for that Q_min.
    """
    edges = sw.edges
    allowed = (edges[:, None] >= floor_topic - 1e-12) & (edges[None, :] >= floor_summ - 1e-12)
    out = {}
    for d, name in enumerate(sw.domains):
        rows = []
        for k, kv in enumerate(sw.k_ladder):
            e = np.where(allowed, sw.eligible[k, d], -1)
            best = int(e.max())
            i, j = np.unravel_index(int(np.argmax(e)), e.shape)
            rows.append({"K": int(kv), "max_queries": max(best, 0), "tau_topic": float(edges[i]),
                         "tau_summ": float(edges[j])})
        out[name] = rows
    return out


def max_k_for(front: dict, Q_min: int) -> dict:
    """Largest K of the ladder with at least ``Q_min`` eligible queries, per domain (0 if none)."""
    return {d: max([r["K"] for r in rows if r["max_queries"] >= Q_min], default=0)
            for d, rows in front.items()}


# ----------------------------------------------------------------------------- interactive counts
class HistogramExplorer:
    """Per-query category counts at any grid point, straight from the sparse histograms (fast).

    ``counts(i, j)`` -> ``(N, 3)`` (topic-only, summary-only, both) at ``(edge_i, edge_j)``;
    ``domain_table(i, j, K, Q_min)`` -> per-domain eligible queries and mean category sizes.
    """

    def __init__(self, store: SignalStore, query_domains, domains, usable=None):
        nb1 = store.hist_bins + 1
        cells = np.asarray(store.hist_cells, np.int64)
        self.tb = (cells // nb1).astype(np.int16)
        self.sb = (cells % nb1).astype(np.int16)
        self.cnt = np.asarray(store.hist_counts, np.int64)
        self.q = np.repeat(np.arange(store.n_docs), np.diff(np.asarray(store.hist_offsets)))
        self.n = store.n_docs
        self.edges = bin_edges(store.hist_bins)
        self.domains = list(domains)
        self.dm = domain_masks(query_domains, domains)
        if usable is not None:
            self.dm &= np.asarray(usable, bool)[None, :]

    def index(self, tau: float) -> int:
        return int(np.clip(np.searchsorted(self.edges, tau - 1e-12), 0, len(self.edges) - 1))

    def counts(self, i: int, j: int) -> np.ndarray:
        t = self.tb > i
        s = self.sb > j
        out = np.empty((self.n, 3), dtype=np.int64)
        for g, m in enumerate((t & ~s, ~t & s, t & s)):
            out[:, g] = np.bincount(self.q[m], weights=self.cnt[m], minlength=self.n)
        return out

    def domain_table(self, i: int, j: int, K: int, Q_min: int):
        c = self.counts(i, j)
        ok = c.min(axis=1) >= K
        rows = []
        for d, name in enumerate(self.domains):
            m = self.dm[d]
            rows.append({"domain": name, "queries": int(m.sum()), "eligible": int((ok & m).sum()),
                         "reaches_Q_min": bool((ok & m).sum() >= Q_min),
                         "median topic-only": float(np.median(c[m, 0])) if m.any() else 0.0,
                         "median summary-only": float(np.median(c[m, 1])) if m.any() else 0.0,
                         "median both": float(np.median(c[m, 2])) if m.any() else 0.0})
        return pl.DataFrame(rows)


# ----------------------------------------------------------------------------- plot data
def sweep_frame(sw: GridSweep, K: int):
    """Long table of eligible queries per (domain, tau_topic, tau_summ) at K (for plots)."""
    k = sw.k_index(K)
    e = sw.edges
    rows = []
    for d, name in enumerate(sw.domains):
        ii, jj = np.meshgrid(np.arange(len(e)), np.arange(len(e)), indexing="ij")
        rows.append(pl.DataFrame({"domain": name, "tau_topic": e[ii.ravel()], "tau_summ": e[jj.ravel()],
                                  "eligible": sw.eligible[k, d].ravel()}))
    return pl.concat(rows)
