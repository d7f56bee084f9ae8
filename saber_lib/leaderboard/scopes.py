"""Query ids and scopes of the authors' result layout: the canonical form of a query id, the domains
in their usual order, and plain means over the scored queries, overall and per domain (and the check
that a file's stored means are those of its per-query values)."""
from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np

from saber_lib.core.config import DOMAINS

OVERALL = "Overall"


def canonical_query_id(q) -> str:
    """Canonical string form of a query id (see the module docstring)."""
    if isinstance(q, bool):
        raise TypeError(f"query id {q!r} is not an id")
    if isinstance(q, (int, np.integer)):
        return str(int(q))
    s = str(q).strip()
    return str(int(s)) if s.isdigit() else s


def ordered_domains(domains: Iterable[Sequence[str]]) -> list[str]:
    """The domains that occur, the five benchmark domains first in their usual order."""
    seen = []
    for ds in domains:
        for d in ds or ():
            if d not in seen:
                seen.append(d)
    return [d for d in DOMAINS if d in seen] + [d for d in seen if d not in DOMAINS]


def plain_mean(values) -> float:
    """numpy's mean over the non-NaN entries (NaN when there are none)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    return float(np.mean(v)) if v.size else math.nan


def scope_masks(domains: Sequence[Sequence[str]], names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """``Overall`` (every query) and one boolean mask per domain (queries listing that domain)."""
    names = ordered_domains(domains) if names is None else list(names)
    out = {OVERALL: np.ones(len(domains), dtype=bool)}
    for d in names:
        out[d] = np.array([d in (ds or ()) for ds in domains], dtype=bool)
    return out


def means_by_scope(values, domains, names=None) -> dict[str, float]:
    """Plain means over the scored queries, overall and per domain."""
    v = np.asarray(values, dtype=np.float64)
    return {s: plain_mean(v[m]) for s, m in scope_masks(domains, names).items()}


def check_stored_means(system, tol: float = 1e-12) -> list[str]:
    """Stored means of a system (``published.System``: ``stored``, ``scores``, ``domains``) that its
    per-query values do not reproduce (empty when all agree)."""
    bad = []
    for task, st in system.stored.items():
        if task not in system.scores:
            bad.append(f"{system.name}/{task}: stored mean but no per-query values")
            continue
        got = means_by_scope(system.scores[task], system.domains, [s for s in st if s != OVERALL])
        for scope, want in st.items():
            if math.isnan(got[scope]):   # nothing to average: say so rather than "recomputed nan"
                what = "no query" if scope == OVERALL else f"no query of domain {scope!r}"
                bad.append(f"{system.name}/{task}/{scope}: {what} has a score (no query lists it, or "
                           f"all its per-query values are null), yet a mean {want!r} is stored; "
                           f"drop that branch or give the per-query values")
            elif not (abs(got[scope] - want) <= tol):
                bad.append(f"{system.name}/{task}/{scope}: stored {want!r}, recomputed {got[scope]!r}")
    return bad
