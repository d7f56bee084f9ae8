"""Query ids and scopes of the authors' result layout: the canonical form of a query id, the domains
in their usual order, and plain means over the scored queries, overall and per domain."""
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
