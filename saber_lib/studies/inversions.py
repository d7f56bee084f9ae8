"""Inversions vs rounds (paper 4.4, Fig. "average inversions"): how far a schedule's
ranking after R rounds is from the ranking fitted on all pairs.

For one query with exhaustive judgments (every unordered pair judged once) and a schedule that
judges a subset of those pairs round by round (looking the outcomes up, so both rankings rest on
the same judge answers), after R rounds

    inversions(R) = #{ i < j : (theta^R_i - theta^R_j) * (theta^all_i - theta^all_j) < 0 },

pairs tied in either ranking (|difference| <= tol) skipped; theta are Bradley-Terry fits.
Averaged over queries, for R = 1..R_max and each schedule (Swiss, random, adaptive), also against
the cumulative number of judgments (the schedules spend slightly different budgets per round).

Two sources of judgments: a simulated judge (latent N(0,1) strengths, answers drawn from
``sigmoid(scale * (s_i - s_j))`` with ``scale`` calibrated to the chosen agreement rate), and the
configured real judge on a few benchmark queries (all ``n(n-1)/2`` pairs judged through
:func:`saber_lib.judging.tournament.run_tournament` with the exhaustive schedule, stored and resumable).
"""
from __future__ import annotations

import numpy as np
import polars as pl

from ..core.progress import track
from ..judging.bradley_terry import fit_bradley_terry, single_thread_blas
from ..judging.simulated import SimulatedJudge
from ..judging.outcomes import CODE_OF_LABEL, LABEL_OF_CODE, weighted_comparisons
from ..judging.rounds import play_rounds
from ..judging.schedules import Standing
from ..judging.tournament import plan_queries
from ..report.plots import SCHEDULE_COLORS

import matplotlib.pyplot as plt  # noqa: E402  (after report.plots has chosen the backend)

STUDY_SCHEDULES = ("swiss", "random", "adaptive")


def count_inversions(theta_a, theta_b, tol: float = 1e-8) -> tuple[int, int]:
    """(inversions, comparable pairs) between two score vectors over all pairs i < j: a pair is an
    inversion when the two orders disagree; pairs tied (|difference| <= tol) in either are skipped."""
    a = np.asarray(theta_a, dtype=float)
    b = np.asarray(theta_b, dtype=float)
    if a.shape != b.shape:
        raise ValueError("the two score vectors differ in length")
    iu = np.triu_indices(len(a), 1)
    da = (a[:, None] - a[None, :])[iu]
    db = (b[:, None] - b[None, :])[iu]
    ok = (np.abs(da) > tol) & (np.abs(db) > tol)
    return int(np.sum(ok & (np.sign(da) != np.sign(db)))), int(ok.sum())


def simulated_codes(judge, query_id: str, n: int) -> np.ndarray:
    """One judgment per unordered pair of candidates ``"0" .. str(n-1)`` by a simulated judge
    (:class:`saber_lib.judging.simulated.SimulatedJudge`, the pair shown in index order):
    ``code[i, j] = 1`` if i was preferred else -1; ``code[j, i] = -code[i, j]``, diagonal 0."""
    code = np.zeros((n, n), dtype=np.int8)
    for i, j in zip(*np.triu_indices(n, 1)):
        code[i, j] = CODE_OF_LABEL[judge(query_id, str(i), str(j))]
        code[j, i] = -code[i, j]
    return code


def codes_from_judgments(judgments, cand_ids) -> np.ndarray:
    """``code`` matrix of one query from its exhaustive judgments table (rows ``a, b, outcome``)."""
    idx = {c: k for k, c in enumerate(cand_ids)}
    n = len(cand_ids)
    code = np.full((n, n), 2, dtype=np.int8)
    for a, b, o in judgments.select("a", "b", "outcome").iter_rows():
        i, j = idx[a], idx[b]
        code[i, j] = CODE_OF_LABEL[o]
        code[j, i] = -CODE_OF_LABEL[o] if o in ("a", "b") else CODE_OF_LABEL[o]
    np.fill_diagonal(code, 2)
    return code


def exhaustive_theta(code: np.ndarray, alpha: float = 0.5) -> np.ndarray:
    """Bradley-Terry fit on every pair's judgment (the reference ranking)."""
    iu = np.triu_indices(len(code), 1)
    w, lo, wt, _ = weighted_comparisons(iu[0], iu[1], code[iu])
    return fit_bradley_terry(len(code), w, lo, alpha=alpha, weights=wt)


def play_schedule(code: np.ndarray, schedule: str, max_rounds: int, seed: int, key: str,
                  alpha: float = 0.5, reference=None) -> list[dict]:
    """Play ``schedule`` for ``max_rounds`` rounds on pre-judged outcomes ``code``; after every round
    fit Bradley-Terry and count inversions against ``reference`` (default: the exhaustive fit).
    Returns one record per round: ``round, judgments`` (cumulative), ``inversions, comparable``."""
    n = len(code)
    ref = exhaustive_theta(code, alpha) if reference is None else reference
    st = Standing(n)
    out = []

    def after_round(r):
        inv, comp = count_inversions(st.fit(alpha), ref)
        out.append({"round": r, "judgments": st.n_judgments, "inversions": inv, "comparable": comp})

    play_rounds([key], {key: st}, lambda r, shown: [LABEL_OF_CODE[int(code[i, j])] for _, i, j in shown],
                last_round=max_rounds, schedule=schedule, seed=seed, alpha=alpha, flip_order=False,
                after_round=after_round)
    return out


def simulated_study(n_candidates: int, n_queries: int, max_rounds: int, agreement: float = 0.78,
                    seed: int = 0, schedules=STUDY_SCHEDULES, alpha: float = 0.5):
    """Per-query inversion curves with the simulated judge: ``n_queries`` seeded queries of
    ``n_candidates`` candidates with N(0,1) latent strengths. Returns a polars DataFrame
    ``setting, query_id, schedule, round, judgments, inversions, comparable``."""
    rows = []
    with single_thread_blas():
        _simulate(rows, n_candidates, n_queries, max_rounds, agreement, seed, schedules, alpha)
    return pl.DataFrame(rows)


def _simulate(rows, n_candidates, n_queries, max_rounds, agreement, seed, schedules, alpha):
    for q in track(range(n_queries), "simulated queries"):
        key = f"sim{q}"
        s = np.random.default_rng([seed, q, 7]).standard_normal(n_candidates)
        judge = SimulatedJudge(agreement, seed, strengths={(key, str(i)): v for i, v in enumerate(s)})
        code = simulated_codes(judge, key, n_candidates)
        ref = exhaustive_theta(code, alpha)
        for sch in schedules:
            for rec in play_schedule(code, sch, max_rounds, seed, key, alpha, ref):
                rows.append({"setting": "simulated", "query_id": key, "schedule": sch, **rec})


def real_study(exhaustive_judgments, benchmark, max_rounds: int, seed: int = 0, schedules=STUDY_SCHEDULES,
               alpha: float = 0.5, max_queries: int = 0):
    """Inversion curves on benchmark queries whose exhaustive judgments are stored (from the
    configured judge): the schedules look the outcomes up, no new judge calls."""
    rows = []
    by_q = {k[0]: g for k, g in exhaustive_judgments.group_by("query_id")}
    with single_thread_blas():
        _real(rows, by_q, benchmark, max_rounds, seed, schedules, alpha, max_queries)
    return pl.DataFrame(rows) if rows else None


def _real(rows, by_q, benchmark, max_rounds, seed, schedules, alpha, max_queries):
    for plan in track(plan_queries(benchmark, max_queries), "queries"):
        if plan.query_id not in by_q:
            continue
        code = codes_from_judgments(by_q[plan.query_id], plan.cand_ids)
        ref = exhaustive_theta(code, alpha)
        for sch in schedules:
            for rec in play_schedule(code, sch, max_rounds, seed, plan.query_id, alpha, ref):
                rows.append({"setting": "real", "query_id": plan.query_id, "schedule": sch, **rec})


def curve_summary(curves):
    """Mean and standard deviation over queries per (setting, schedule, round)."""
    return (curves.group_by("setting", "schedule", "round").agg(
        pl.col("judgments").mean().alias("judgments"),
        pl.col("inversions").mean().alias("inversions"),
        pl.col("inversions").std().alias("inversions_sd"),
        pl.col("comparable").mean().alias("comparable"),
        pl.len().alias("n_queries"),
    ).sort("setting", "schedule", "round"))


def judgments_to_reach(summary, schedule: str, target: float, setting: str = "simulated") -> float:
    """Mean number of judgments from which on ``schedule``'s mean inversion count stays <= target
    (linear interpolation between the last round above the target and the next); ``nan`` if it
    ends above. (The first rounds can sit below the target only because their many tied
    candidates leave few comparable pairs, so the last crossing is the one that counts.)"""
    s = summary.filter((pl.col("schedule") == schedule) & (pl.col("setting") == setting)).sort("round")
    j = s["judgments"].to_numpy()
    v = s["inversions"].to_numpy()
    if len(v) == 0 or v[-1] > target:
        return float("nan")
    above = np.nonzero(v > target)[0]
    if len(above) == 0:
        return float(j[0])
    k = above[-1] + 1
    f = (v[k - 1] - target) / (v[k - 1] - v[k])
    return float(j[k - 1] + f * (j[k] - j[k - 1]))


def plot_inversions(summary, setting: str, n_candidates: int, paper_ref=(20, 700.0, 1500.0),
                    title: str = ""):
    """Two panels: mean inversions vs rounds and vs judgments, per schedule (SCHEDULE_COLORS),
    with the paper's reference point (R = 20: ~700 inversions of 11,175 pairs, 1,500 judgments)
    drawn only when ``n_candidates`` is the paper's 150."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    s = summary.filter(pl.col("setting") == setting)
    for sch in STUDY_SCHEDULES:
        d = s.filter(pl.col("schedule") == sch).sort("round")
        if d.height == 0:
            continue
        c = SCHEDULE_COLORS.get(sch)
        axes[0].plot(d["round"], d["inversions"], marker=".", color=c, label=sch)
        lo = (d["inversions"] - d["inversions_sd"].fill_null(0)).to_numpy()
        hi = (d["inversions"] + d["inversions_sd"].fill_null(0)).to_numpy()
        axes[0].fill_between(d["round"].to_numpy(), lo, hi, color=c, alpha=0.12, lw=0)
        axes[1].plot(d["judgments"], d["inversions"], marker=".", color=c, label=sch)
    total = n_candidates * (n_candidates - 1) // 2
    if n_candidates == 150 and paper_ref:
        r, inv, jud = paper_ref
        axes[0].scatter([r], [inv], marker="*", s=120, color="black", zorder=5, label="paper (Swiss, R=20)")
        axes[1].scatter([jud], [inv], marker="*", s=120, color="black", zorder=5, label="paper (Swiss, R=20)")
    axes[0].set_xlabel("rounds R")
    axes[1].set_xlabel("judgments per query")
    axes[0].set_ylabel(f"mean inversions (of {total:,} pairs)")
    axes[1].legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def study_table(summary, ref_round: int = 20, reference_schedule: str = "swiss"):
    """One row per (setting, schedule) at round ``ref_round`` (or the last round played when fewer):
    mean judgments, mean inversions (sd), comparable pairs, and ``judgments_to_match``: the
    judgments that schedule needs to reach the ``reference_schedule``'s inversions at that round."""
    rows = []
    for setting in summary["setting"].unique(maintain_order=True).to_list():
        s = summary.filter(pl.col("setting") == setting)
        r = min(ref_round, int(s["round"].max()))
        ref = s.filter((pl.col("schedule") == reference_schedule) & (pl.col("round") == r))
        target = float(ref["inversions"][0]) if ref.height else float("nan")
        for sch in s["schedule"].unique(maintain_order=True).to_list():
            row = s.filter((pl.col("schedule") == sch) & (pl.col("round") == r)).row(0, named=True)
            rows.append({"setting": setting, "schedule": sch, "round": r, "judgments": row["judgments"],
                         "inversions": row["inversions"], "inversions_sd": row["inversions_sd"],
                         "comparable": row["comparable"], "n_queries": row["n_queries"],
                         "judgments_to_match": judgments_to_reach(summary, sch, target, setting)})
    return pl.DataFrame(rows)
