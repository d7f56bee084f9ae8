"""What the threshold explorer (``05_thresholds``) computes: the consequences of one threshold point.

:class:`ExplorerModel` answers, for a grid point ``(tau_topic, tau_summ)`` and ``K``, ``Q_min``, in
milliseconds on a demo-size store (``benchmarks/bench_explorer.py``):

* per query the candidates of each category (topic-only, summary-only, both), exact on the grid,
  from the sparse histograms (module :mod:`saber_lib.signals.thresholds`). The histogram cells are
  sorted once by topic bin (descending), so the cells with ``bin_topic > i`` are a prefix of that
  order and ``both`` is one masked ``bincount`` over the prefix; ``topic-only`` and
  ``summary-only`` come from per-query marginal suffix sums;
* per domain: eligible queries (at least ``K`` in every category), whether ``Q_min`` is reached,
  and the median category sizes over the eligible queries;
* which threshold rule (``paper``, ``strictest``, ``quantile``) would pick the point, from
  :func:`~saber_lib.signals.thresholds.find_thresholds` on the sweep (cached per ``K``, ``Q_min``).

:func:`write_threshold_profile` saves a chosen point as a profile override (``inherit:`` the run's
profile, ``threshold_rule: fixed``) and validates it with :func:`saber_lib.core.config.load_profile`.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import polars as pl

from ..core import config
from ..core.config_yaml import load_layers, read_yaml
from ..core.data import atomic_write
from .store import SignalStore, bin_edges
from .thresholds import GROUPS, GridSweep, domain_masks, find_thresholds

RULES = ("paper", "strictest", "quantile")
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")


@dataclass
class PointState:
    """Consequences of one threshold point (what the explorer shows)."""

    i: int
    j: int
    tau_topic: float
    tau_summ: float
    K: int
    Q_min: int
    eligible: dict            # domain -> eligible queries
    table: pl.DataFrame       # one row per domain
    rules: list               # rules that pick this exact point
    feasible: bool            # every domain reaches Q_min
    short: list = field(default_factory=list)   # domains below Q_min

    def rule_text(self) -> str:
        if self.rules:
            return "picked by rule " + " and ".join(f"'{r}'" for r in self.rules)
        return "no rule picks this point: it needs threshold_rule 'fixed' (the Save button writes that)"


class ExplorerModel:
    """Per-query category counts at any grid point, plus the per-domain read-out (see module doc).

    ``sweep``: the :class:`GridSweep` the stage computed (for the rules and the heat maps); its K
    ladder is the set of K values the explorer offers.
    """

    def __init__(self, store: SignalStore, query_domains, domains, sweep: GridSweep, usable=None, *,
                 floor_topic: float = 0.0, floor_summ: float = 0.0, order: str = "topic_first",
                 quantile: float = 0.99):
        nb1 = store.hist_bins + 1
        self.nb1, self.n = nb1, store.n_docs
        self.edges = bin_edges(store.hist_bins)
        self.domains = list(domains)
        self.sweep = sweep
        self.floor_topic, self.floor_summ = float(floor_topic), float(floor_summ)
        self.order, self.quantile = order, quantile
        self.dm = domain_masks(query_domains, domains)
        if usable is not None:
            self.dm &= np.asarray(usable, bool)[None, :]
        cells = np.asarray(store.hist_cells, np.int64)
        tb, sb = cells // nb1, cells % nb1
        cnt = np.asarray(store.hist_counts, np.int64)
        q = np.repeat(np.arange(self.n, dtype=np.int64), np.diff(np.asarray(store.hist_offsets, np.int64)))
        # per-query marginal suffix sums: gt_topic[q, i] = pairs of q with bin_topic > i
        self.gt_topic = self._suffix(np.bincount(q * nb1 + tb, weights=cnt, minlength=self.n * nb1))
        self.gt_summ = self._suffix(np.bincount(q * nb1 + sb, weights=cnt, minlength=self.n * nb1))
        order_ = np.argsort(nb1 - 1 - tb, kind="stable")           # topic bin descending
        self._sb = sb[order_].astype(np.int16)
        self._q = q[order_].astype(np.int32)
        self._cnt = cnt[order_].astype(np.float64)
        # _prefix[i] = number of cells with bin_topic > i
        per_bin = np.bincount(tb, minlength=nb1)
        self._prefix = np.concatenate([np.cumsum(per_bin[::-1])[::-1][1:], [0]]).astype(np.int64)
        self._rules_cache: dict = {}

    def _suffix(self, flat: np.ndarray) -> np.ndarray:
        h = flat.reshape(self.n, self.nb1)
        r = np.cumsum(h[:, ::-1], axis=1)[:, ::-1]           # r[:, b] = sum_{b' >= b}
        return np.concatenate([r[:, 1:], np.zeros((self.n, 1))], axis=1).astype(np.int64)

    # --- grid
    def index(self, tau: float) -> int:
        return int(np.clip(np.searchsorted(self.edges, tau - 1e-12), 0, len(self.edges) - 1))

    def k_options(self) -> list[int]:
        return [int(k) for k in self.sweep.k_ladder]

    def counts(self, i: int, j: int) -> np.ndarray:
        """``(N, 3)`` candidates per query: topic-only, summary-only, both at ``(edge_i, edge_j)``."""
        n = int(self._prefix[i])
        m = self._sb[:n] > j
        both = np.rint(np.bincount(self._q[:n][m], weights=self._cnt[:n][m], minlength=self.n)).astype(np.int64)
        return np.stack([self.gt_topic[:, i] - both, self.gt_summ[:, j] - both, both], axis=1)

    # --- rules
    def rule_points(self, K: int, Q_min: int) -> dict:
        """rule -> (i, j) grid point it picks (None when it picks none), cached per (K, Q_min)."""
        key = (int(K), int(Q_min))
        if key not in self._rules_cache:
            out = {}
            for rule in RULES:
                res = find_thresholds(self.sweep, K=K, Q_min=Q_min, rule=rule, quantile=self.quantile,
                                      floor_topic=self.floor_topic, floor_summ=self.floor_summ, order=self.order)
                t, s = res["tau_topic"], res["tau_summ"]
                out[rule] = None if t is None or s is None else (self.index(t), self.index(s))
            self._rules_cache[key] = out
        return self._rules_cache[key]

    # --- the read-out
    def state(self, tau_topic: float, tau_summ: float, K: int, Q_min: int) -> PointState:
        i, j = self.index(tau_topic), self.index(tau_summ)
        c = self.counts(i, j)
        ok = c.min(axis=1) >= K
        rows, elig = [], {}
        for d, name in enumerate(self.domains):
            m = self.dm[d]
            e = ok & m
            elig[name] = int(e.sum())
            med = np.median(c[e], axis=0) if e.any() else np.zeros(3)
            rows.append({"domain": name, "queries": int(m.sum()), "eligible": elig[name],
                         "reaches Q_min": bool(elig[name] >= Q_min),
                         **{f"median {g}": float(med[g_]) for g_, g in enumerate(GROUPS)}})
        short = [d for d in self.domains if elig[d] < Q_min]
        rules = [r for r, pt in self.rule_points(K, Q_min).items() if pt == (i, j)] if K in self.k_options() else []
        return PointState(i=i, j=j, tau_topic=float(self.edges[i]), tau_summ=float(self.edges[j]), K=int(K),
                          Q_min=int(Q_min), eligible=elig, table=pl.DataFrame(rows), rules=rules,
                          feasible=not short, short=short)


# ----------------------------------------------------------------------------- profile override
SHIPPED_PROFILES = ("paper", "demo", "tiny", "cluster", "released", "llm-cpu")   # params/*.yaml of the project
PROJECT_PARAMS = Path(__file__).resolve().parents[2] / "params"


def _refuse_profile_in_use(path: Path, parent: Path) -> None:
    """``ValueError`` when writing ``path`` would replace a profile others rely on: one of the
    project's shipped profiles, one in the inherit chain of ``parent`` (the new file would inherit
    itself: a cycle), or one that another profile in its folder inherits from."""
    if path.parent == PROJECT_PARAMS and path.stem in SHIPPED_PROFILES:
        raise ValueError(f"{path} is one of the project's shipped profiles; choose another name")
    chain = [f for f, _ in load_layers(parent)]
    if path in chain:
        raise ValueError(f"{path} is in the inherit chain of the run's profile {parent}: writing it would "
                         "make an inherit cycle; choose another name")
    for other in sorted(path.parent.glob("*.yaml")):
        if other.resolve() == path:
            continue
        try:
            inherit = read_yaml(other).get("inherit")
        except config.ProfileError:
            continue   # a broken neighbour is not ours to judge here
        if isinstance(inherit, str) and (other.parent / inherit).resolve() == path:
            raise ValueError(f"{path} is inherited by {other.resolve()}; choose another name")


def write_threshold_profile(parent, name: str, *, tau_topic: float, tau_summ: float, K: int | None = None,
                            Q_min: int | None = None, out_dir=None, overwrite: bool = False,
                            note: str = "") -> Path:
    """Write ``<out_dir>/<name>.yaml``: ``inherit:`` the profile ``parent`` with ``threshold_rule:
    fixed`` and the thresholds (and ``K``, ``Q_min`` when given). ``out_dir`` defaults to the
    parent's folder. The file is validated (:func:`config.load_profile`) and removed again if the
    profile does not load. Raises ``FileExistsError`` unless ``overwrite``."""
    parent = Path(parent).resolve()
    if not parent.exists():
        raise FileNotFoundError(f"the run's profile {parent} does not exist")
    if not _NAME_RE.match(name or "") or name in (".", ".."):
        raise ValueError(f"profile name {name!r}: use letters, digits, '_', '-', '.'")
    out_dir = Path(out_dir).resolve() if out_dir else parent.parent
    path = out_dir / f"{name.removesuffix('.yaml')}.yaml"
    if path == parent:
        raise ValueError(f"{path} is the run's own profile; choose another name")
    _refuse_profile_in_use(path, parent)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists")
    rel = os.path.relpath(parent, out_dir)
    lines = [f"# Threshold override written by the threshold explorer (05_thresholds){note}",
             f"# on {datetime.now(timezone.utc).isoformat(timespec='seconds')}.",
             f"inherit: {rel}", "", "thresholds:", "  threshold_rule: fixed",
             f"  tau_topic: {round(float(tau_topic), 6)!r}", f"  tau_summ: {round(float(tau_summ), 6)!r}"]
    if K is not None:
        lines.append(f"  K: {int(K)}")
    if Q_min is not None:
        lines.append(f"  Q_min: {int(Q_min)}")
    def write(tmp: Path) -> None:   # the profile must load before it takes its name
        tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
        config.load_profile(tmp)

    atomic_write(path, write)
    return path
