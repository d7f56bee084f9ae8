"""Benchmark selection (paper 3.4, App. B.3): queries balanced over the domains and ``K``
candidates per group, sampled from the pairs stored by the ``signals`` stage at the thresholds of
the ``thresholds`` stage (see :mod:`saber_lib.signals.thresholds` for the groups).
"""
from __future__ import annotations

import numpy as np
import polars as pl

from ..signals.store import SignalStore
from ..signals.thresholds import GROUPS, domain_masks


def candidate_groups(ids, topic, summ, tau_topic: float, tau_summ: float):
    """Split a query's stored candidates into the three groups (arrays of candidate rows)."""
    t = np.asarray(topic, np.float64) > tau_topic
    s = np.asarray(summ, np.float64) > tau_summ
    return {"topic-only": ids[t & ~s], "summary-only": ids[~t & s], "both": ids[t & s]}


def eligible_counts(store: SignalStore, tau_topic: float, tau_summ: float, usable=None,
                    chunk_pairs: int = 1 << 22) -> np.ndarray:
    """``(N, 3)`` exact category sizes per query from the stored pairs (needs taus >= floors), read
    a block of queries (about ``chunk_pairs`` stored pairs) at a time: memory bounded, not ~30 bytes
    per stored pair (the store is ``N^2`` times its stored share)."""
    _check_floors(store, tau_topic, tau_summ)
    off = np.asarray(store.pair_offsets)
    ok_row = None if usable is None else np.asarray(usable, bool)
    out = np.zeros((store.n_docs, 3), np.int64)
    q0 = 0
    while q0 < store.n_docs:
        q1 = int(np.clip(np.searchsorted(off, off[q0] + chunk_pairs, side="right") - 1, q0 + 1, store.n_docs))
        a, b = int(off[q0]), int(off[q1])
        q = np.repeat(np.arange(q1 - q0), np.diff(off[q0:q1 + 1]))
        t = np.asarray(store.pair_topic[a:b], np.float64) > tau_topic
        s = np.asarray(store.pair_summ[a:b], np.float64) > tau_summ
        ok = np.ones(b - a, bool) if ok_row is None else ok_row[np.asarray(store.pair_ids[a:b])]
        for g, m in enumerate((t & ~s, ~t & s, t & s)):
            out[q0:q1, g] = np.bincount(q[m & ok], minlength=q1 - q0)
        q0 = q1
    return out


def _check_floors(store: SignalStore, tau_topic: float, tau_summ: float):
    ft, fs = store.meta["pair_floor_topic"], store.meta["pair_floor_summ"]
    if tau_topic < ft - 1e-12 or tau_summ < fs - 1e-12:
        raise ValueError(
            f"thresholds ({tau_topic}, {tau_summ}) are below the stored pair floors ({ft}, {fs}): "
            "candidates below the floor were not stored; lower signals.pair_floor_topic / "
            "signals.pair_floor_summ and rerun stage 'signals', or raise the thresholds")


def domain_quotas(n_queries: int, domains) -> dict:
    """``n_queries`` split as evenly as possible; the first domains take the remainder."""
    base, rem = divmod(n_queries, len(domains))
    return {d: base + (1 if k < rem else 0) for k, d in enumerate(domains)}


def select_benchmark(store: SignalStore, query_domains, *, tau_topic: float, tau_summ: float, K: int,
                     n_queries: int, domains, seed: int, usable=None, exclude=None,
                     fill_shortfall: bool = False):
    """Queries balanced over ``domains`` and ``K`` candidates per group, uniformly sampled.

    * eligible queries: usable, with a domain among ``domains``, at least ``K`` usable candidates in
      every group (the query itself and pairs in ``exclude`` never count: they are not stored).
    * quotas: ``n_queries`` split evenly over the domains; domains are filled scarcest first (fewest
      eligible queries), each from a seeded permutation of its eligible, not yet taken, queries. A
      query with several domains fills one slot.
    * candidates: ``K`` per group by ``rng.choice`` without replacement, ordered
      ``[topic-only | summary-only | both]``; positions ``0 .. 3K-1``.

    * ``fill_shortfall``: when some domains have fewer eligible queries than their quota, fill the
      missing slots from the remaining eligible queries (seeded order), each counted under its
      least-filled domain; the report lists how many slots were filled this way.
    ``exclude``: optional dict query row -> set of candidate rows to leave out (near-duplicates).
    Returns ``(benchmark DataFrame, report dict)``.
    """
    if tau_topic is None or tau_summ is None:
        raise ValueError("no thresholds to select with: no query reaches thresholds.K candidates per "
                         "group at any threshold (see the frontier in thresholds.json); lower "
                         "thresholds.K or set threshold_rule: fixed")
    _check_floors(store, tau_topic, tau_summ)
    rng = np.random.default_rng(seed)
    n = store.n_docs
    usable = np.ones(n, bool) if usable is None else np.asarray(usable, bool)
    counts = eligible_counts(store, tau_topic, tau_summ, usable)
    ok = usable & (counts.min(axis=1) >= K)
    dm = domain_masks(query_domains, domains)
    quotas = domain_quotas(n_queries, domains)
    avail = {d: int((dm[k] & ok).sum()) for k, d in enumerate(domains)}
    taken = np.zeros(n, bool)
    chosen: list[tuple[int, str]] = []
    for k in sorted(range(len(domains)), key=lambda k: (avail[domains[k]], k)):
        d = domains[k]
        pool = np.flatnonzero(dm[k] & ok)
        pool = pool[rng.permutation(len(pool))]
        got = 0
        for q in pool:
            if got >= quotas[d]:
                break
            if taken[q]:
                continue
            if exclude and q in exclude:
                ids, t, s = store.pairs(int(q))
                keep = usable[ids] & ~np.isin(ids, list(exclude[q]))
                g = candidate_groups(ids[keep], t[keep], s[keep], tau_topic, tau_summ)
                if min(len(v) for v in g.values()) < K:
                    continue
            taken[q] = True
            chosen.append((int(q), d))
            got += 1
    n_filled = 0
    if fill_shortfall and len(chosen) < n_queries:
        pool = np.flatnonzero(ok & dm.any(axis=0) & ~taken)
        count = {d: sum(1 for _, dd in chosen if dd == d) for d in domains}
        for q in pool[rng.permutation(len(pool))]:
            if len(chosen) >= n_queries:
                break
            if exclude and q in exclude:
                continue
            d = min((domains[k] for k in range(len(domains)) if dm[k, q]), key=lambda x: count[x])
            taken[q] = True
            chosen.append((int(q), d))
            count[d] += 1
            n_filled += 1
    if not chosen:   # an empty benchmark would only fail later (the tournament divides by it)
        raise ValueError(
            f"no query is eligible at tau_topic={tau_topic}, tau_summ={tau_summ}, K={K} (thresholds."
            f"tau_topic, thresholds.tau_summ, thresholds.K; eligible per domain: {avail}): every query "
            f"has fewer than K candidates in some group. Lower thresholds.K or pick thresholds that "
            f"leave queries with the threshold explorer (make lab, notebook 05_thresholds)")
    chosen.sort()  # benchmark rows in corpus order; the sampling above fixed which queries
    rows = {c: [] for c in ("query_id", "query_domains", "cand_id", "position", "group", "sim_topic",
                            "sim_summ")}
    for q, _ in chosen:
        ids, t, s = store.pairs(q)
        keep = usable[ids]
        if exclude and q in exclude:
            keep &= ~np.isin(ids, list(exclude[q]))
        ids, t, s = ids[keep], t[keep], s[keep]
        groups = candidate_groups(np.arange(len(ids)), t, s, tau_topic, tau_summ)
        pos = 0
        for g in GROUPS:
            pick = rng.choice(groups[g], size=K, replace=False)
            for p in pick:
                rows["query_id"].append(store.doc_ids[q])
                rows["query_domains"].append(list(query_domains[q] or []))
                rows["cand_id"].append(store.doc_ids[int(ids[p])])
                rows["position"].append(pos)
                rows["group"].append(g)
                rows["sim_topic"].append(float(t[p]))
                rows["sim_summ"].append(float(s[p]))
                pos += 1
    df = pl.DataFrame(rows, schema={"query_id": pl.String, "query_domains": pl.List(pl.String),
                                    "cand_id": pl.String, "position": pl.Int32, "group": pl.String,
                                    "sim_topic": pl.Float64, "sim_summ": pl.Float64})
    got = {d: sum(1 for _, dd in chosen if dd == d) for d in domains}
    report = {"n_selected": len(chosen), "n_requested": n_queries, "quota": quotas, "selected": got,
              "eligible_queries": avail, "shortfall": {d: max(0, quotas[d] - got[d]) for d in domains},
              "filled_from_other_domains": n_filled,
              "tau_topic": tau_topic, "tau_summ": tau_summ, "K": K, "seed": seed,
              "slot_domain": {store.doc_ids[q]: d for q, d in chosen}}
    return df, report
