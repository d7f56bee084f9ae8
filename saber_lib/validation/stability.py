"""What limits system-ranking fidelity (:mod:`.fidelity`) on a few graded queries: the judge, the
number of queries, or the rating design.

* **Noise floor** (:func:`noise_floor`): the split-half Kendall tau of the *reference itself*
  (every retriever's nDCG under the grades, the main setting), from
  :func:`saber_lib.metrics.stability.split_half` at every query count up to half the graded queries,
  and at all of them (two disjoint sets of that size do not exist among the graded queries, so the
  value there comes from the curve ``1 - tau = a n^-b`` fitted to the measured ones and says
  ``extrapolated``). Two sets of n queries judged by the grades themselves order the retrievers
  this alike; a judge whose fidelity tau on n queries reaches it cannot be told apart from the
  reference with n queries (:func:`limiting_factor`).
* **The rating design's ceiling** (:func:`ceiling_design`): the grades as the judge
  (:class:`.fidelity.GradeJudge`) through tournaments of R rounds of the benchmark's schedule (R in
  ``judge_validation.jv_design_rounds``; 0 = every pair, the exhaustive schedule) and each relevance
  mapping of ``jv_design_rescalings`` (``min-max``: the benchmark's ratings; ``theta``: the
  Bradley-Terry strengths without the min-max, each query's lowest at 0, exponential gain; a scheme
  of :mod:`saber_lib.metrics.rescaling` applied to the ratings, with its gain); also the grades
  themselves as ratings (no tournament, ``schedule`` ``none``) through each mapping but ``theta``
  (``min-max``: each query's grades stretched onto ``[0, top]``): what the mapping alone loses. Each
  cell is the fidelity tau against the grades on the benchmark's scale and gain, with its interval
  over resampled queries (:func:`.fidelity.fidelity_stats`). Report only: the benchmark keeps its
  design.
"""
from __future__ import annotations

import json
import math
import tempfile

import numpy as np
import polars as pl

from ..core.scales import parse_scheme
from ..judging.bradley_terry import rescale
from ..judging.tournament import run_tournament
from ..metrics import stability as stb
from ..metrics.rescaling import scheme_ratings
from . import fidelity

DESIGN_SCHEMA = {"rescaling": pl.Utf8, "schedule": pl.Utf8, "rounds": pl.Int64, "judgments": pl.Int64,
                 "ceiling_tau": pl.Float64, "ci_low": pl.Float64, "ci_high": pl.Float64, "n_systems": pl.Int64,
                 "n_queries": pl.Int64}
NO_TOURNAMENT = "none"


def noise_floor(per_query: pl.DataFrame, *, n_splits: int, seed: int, setting: str = fidelity.MAIN_SETTING) -> dict:
    """The reference's split-half tau (module docstring): ``n_queries`` (graded), ``tau`` (mean
    split-half tau at ``n_queries``, extrapolated), ``extrapolated``, ``measured`` (per query count
    up to half: ``n``, ``tau_mean``, ``tau_median``, ``tau_p5``), ``n_splits``."""
    systems, queries, _, B = fidelity._matrices(per_query, setting)
    Q = len(queries)
    out = {"setting": setting, "n_queries": Q, "n_systems": len(systems), "n_splits": int(n_splits), "tau": None,
           "extrapolated": None, "measured": []}
    if len(systems) < 2 or Q < 2:
        return out
    for n in stb.query_counts(Q):
        sh = stb.split_half(B, n, n_splits, seed)
        out["measured"].append({"n": n, **{k: None if math.isnan(sh[k]) else sh[k]
                                           for k in ("tau_mean", "tau_median", "tau_p5")}})
    m = [r for r in out["measured"] if r["tau_mean"] is not None]
    at = stb.tau_at([r["n"] for r in m], [r["tau_mean"] for r in m], Q)
    out.update(tau=at["tau"], extrapolated=at["extrapolated"])
    return out


def limiting_factor(summary: dict, floor: dict) -> tuple[str, str]:
    """``(factor, sentence)``: ``judge`` when the fidelity interval lies wholly below the noise
    floor (the judge reorders the retrievers more than another set of as many queries would),
    ``queries`` when the fidelity tau or its interval reaches it, ``undetermined`` without both."""
    tau, hi, f = summary.get("kendall_tau"), summary.get("ci_high"), floor.get("tau")
    n = floor.get("n_queries")
    if tau is None or f is None:
        return "undetermined", "no noise floor or no fidelity tau: the limit is undetermined"
    floor_txt = f"the grades' own split-half tau at {n} queries is {f:.2f}" + (" (extrapolated)" if floor["extrapolated"] else "")
    top = hi if hi is not None else tau
    if top < f:
        return "judge", (f"the judge limits the fidelity: its tau {tau:.2f} (interval up to {top:.2f}) stays below the "
                         f"noise floor ({floor_txt})")
    return "queries", (f"the number of queries limits the fidelity: its tau {tau:.2f}"
                       + (f" (interval up to {hi:.2f})" if hi is not None and tau < f else "")
                       + f" reaches the noise floor ({floor_txt}); more graded queries, not another judge, would tell more")


def _by_query(ratings: pl.DataFrame, column: str, fn) -> np.ndarray:
    """``fn`` applied to ``column`` within each query (row order kept)."""
    out = np.empty(ratings.height)
    q = ratings["query_id"].to_numpy()
    v = ratings[column].to_numpy().astype(np.float64)
    for qid in np.unique(q):
        idx = np.flatnonzero(q == qid)
        out[idx] = fn(v[idx])
    return out


def design_ratings(ratings: pl.DataFrame, mapping: str, top: float, column: str = "rating") -> tuple[pl.DataFrame, str]:
    """The ratings frame with ``rating`` replaced by the mapping of ``column`` (module docstring),
    and the nDCG gain to score it with."""
    if mapping == "min-max":
        values, gain = _by_query(ratings, column, lambda v: rescale(v, top)), "exp"
    elif mapping == "theta":
        values, gain = _by_query(ratings, "theta", lambda v: v - v.min()), "exp"
    else:
        sch = parse_scheme(mapping)
        values, gain = scheme_ratings(ratings[column].to_numpy(), ratings["query_id"].to_numpy(), sch, top), sch.gain
    return ratings.with_columns(pl.Series("rating", values)), gain


def _cell(scores, rated, gain, grades, covered, *, top, k, tie_policy, n_resamples, level, seed) -> dict:
    per_q = fidelity.ndcg_both_ways(scores, rated, grades, covered, top=top, k=k, tie_policy=tie_policy, gain=gain)
    st = fidelity.fidelity_stats(per_q, n_resamples=n_resamples, level=level, seed=seed,
                                 bias=pl.DataFrame(schema=fidelity.BIAS_SCHEMA))
    return {"ceiling_tau": st["kendall_tau"], "ci_low": st["ci_low"], "ci_high": st["ci_high"],
            "n_systems": st["n_systems"], "n_queries": st["n_queries"]}


def ceiling_design(bench, docs, grades, covered, scores, *, rounds_list, mappings, schedule: str, seed: int,
                   alpha: float, top: float, k: int, tie_policy: str, n_resamples: int, level: float) -> pl.DataFrame:
    """The grid of the module docstring (:data:`DESIGN_SCHEMA`): one row per (tournament, mapping)
    and per mapping of the grades without a tournament."""
    sub = bench.filter(pl.col("query_id").is_in(list(covered)))
    judge = fidelity.GradeJudge({(q, d): g for q, d, g in grades.select("query_id", "doc_id", "grade").iter_rows()})
    kw = dict(top=top, k=k, tie_policy=tie_policy, n_resamples=n_resamples, level=level, seed=seed)
    rows = []
    for R in rounds_list:
        sched = "exhaustive" if R == 0 else schedule
        with tempfile.TemporaryDirectory(prefix="saber-design-") as tmp:
            res = run_tournament(sub, docs, judge, schedule=sched, rounds=max(int(R), 1), seed=seed, store_dir=tmp,
                                 alpha=alpha, top=top)
        n_judged = int((res.judgments["outcome"] != "failure").sum()) if res.judgments.height else 0
        for m in mappings:
            rated, gain = design_ratings(res.ratings, m, top)
            rows.append({"rescaling": m, "schedule": sched, "rounds": int(res.rounds_played), "judgments": n_judged,
                         **_cell(scores, rated, gain, grades, covered, **kw)})
    base = fidelity.reference_ratings(sub.select("query_id", "cand_id", "position"), grades, covered, top)
    for m in mappings:
        if m == "theta":
            continue
        rated, gain = design_ratings(base, m, top)
        rows.append({"rescaling": m, "schedule": NO_TOURNAMENT, "rounds": 0, "judgments": 0,
                     **_cell(scores, rated, gain, grades, covered, **kw)})
    return pl.DataFrame(rows, schema=DESIGN_SCHEMA)


def design_figure(table: pl.DataFrame, *, ax):
    """Ceiling tau with its interval against the judgments spent (log axis), one line per mapping;
    the grades without a tournament as markers at the left edge."""
    played = table.filter(pl.col("schedule") != NO_TOURNAMENT)
    for i, (m,) in enumerate(played.select("rescaling").unique(maintain_order=True).iter_rows()):
        part = played.filter(pl.col("rescaling") == m).sort("judgments")
        x, y = part["judgments"].to_numpy(), part["ceiling_tau"].fill_null(np.nan).to_numpy()
        lo, hi = part["ci_low"].fill_null(np.nan).to_numpy(), part["ci_high"].fill_null(np.nan).to_numpy()
        off = 1.0 + 0.02 * i                                   # spread the intervals apart
        ax.errorbar(x * off, y, yerr=np.vstack([y - lo, hi - y]), marker="o", capsize=2, lw=1, label=m, color=f"C{i}")
        g = table.filter((pl.col("schedule") == NO_TOURNAMENT) & (pl.col("rescaling") == m))
        if g.height and x.size:
            ax.scatter([x.min() * 0.6], g["ceiling_tau"].fill_null(np.nan).to_list(), marker="*", s=60, color=f"C{i}")
    ax.set_xscale("log")
    ax.set_xlabel("judgments (grades as the judge; *: the grades themselves, no tournament)")
    ax.set_ylabel("ceiling Kendall tau-b vs the grades")
    ax.legend(fontsize=7, title="relevance mapping", title_fontsize=7)
    return ax


def write_limits(ctx, sec: dict, params, *, bench, scores, backends: str) -> list:
    """The noise floor and the design grid of a graded section with a fidelity (``sec`` from
    :func:`saber_lib.validation.grades_stage.grades_section`): ``noise_floor.json``,
    ``ceiling_design.parquet``, their tables and the ``ceiling_design`` figure; the facts go into the
    manifest (``fidelity_limits``). Returns ``(title, table)`` pairs to show."""
    import matplotlib.pyplot as plt  # pyplot only once saber_lib.report.plots has chosen the backend

    p = params
    floor = noise_floor(sec["per_query"], n_splits=p["stability_splits"], seed=p["seed"])
    factor, sentence = limiting_factor(sec["fidelity"], floor)
    floor.update(limiting_factor=factor, reading=sentence, fidelity_tau=sec["fidelity"]["kendall_tau"],
                 fidelity_ci_low=sec["fidelity"]["ci_low"], fidelity_ci_high=sec["fidelity"]["ci_high"])
    ctx.path("noise_floor.json").write_text(json.dumps(floor, indent=2, sort_keys=True) + "\n")
    floor_table = pl.DataFrame(floor["measured"], schema={"n": pl.Int64, "tau_mean": pl.Float64,
                                                          "tau_median": pl.Float64, "tau_p5": pl.Float64})
    cap_floor = (f"Noise floor of the system fidelity: split-half Kendall tau-b of the retrievers' order under the grades "
                 f"themselves, two disjoint sets of n graded queries ({p['stability_splits']} seeded splits); at all "
                 f"{floor['n_queries']} graded queries " + (f"{floor['tau']:.2f}" if floor["tau"] is not None else "undefined")
                 + (" (extrapolated by 1 - tau = a n^-b)" if floor["extrapolated"] else "") + f". {sentence}. {backends}")
    ctx.save_table(floor_table, "fidelity_noise_floor", caption=cap_floor, float_fmt="{:.3f}")
    design = ceiling_design(bench, sec["docs"], sec["grades"], sec["covered"], scores,
                            rounds_list=p["jv_design_rounds"], mappings=p["jv_design_rescalings"], schedule=p["schedule"],
                            seed=p["seed"], alpha=p["bt_alpha"], top=p["rating_top"], k=p["ndcg_k"],
                            tie_policy=p["tie_policy"], n_resamples=p["jv_n_resamples"], level=p["jv_ci_level"])
    design.write_parquet(ctx.path("ceiling_design.parquet"))
    cap = (f"The rating design's ceiling on the {len(sec['covered'])} graded queries: Kendall tau-b of the retrievers' "
           f"order (nDCG@{p['ndcg_k']}, {fidelity.MAIN_SETTING}) under ratings from the grades as the judge against the "
           f"order under the grades, for tournaments of R rounds ({p['schedule']}; exhaustive = every pair) and each "
           f"relevance mapping (min-max: the benchmark's ratings; theta: Bradley-Terry strengths without min-max; a "
           f"rescaling scheme with its gain; schedule none: the grades themselves mapped), {p['jv_ci_level']:.0%} "
           f"interval over resampled queries ({p['jv_n_resamples']} resamples). Report only. {backends}")
    ctx.save_table(design, "ceiling_design", caption=cap, float_fmt="{:.3f}")
    fig, ax = plt.subplots(figsize=(7, 4))
    design_figure(design, ax=ax)
    fig.tight_layout()
    ctx.save_figure(fig, "ceiling_design", caption=cap, backends=backends)
    plt.close(fig)
    ctx.record(fidelity_limits={"noise_floor": floor["tau"], "noise_floor_extrapolated": floor["extrapolated"],
                                "limiting_factor": factor, "reading": sentence, "design_rows": design.height})
    return [(f"fidelity_noise_floor: {cap_floor}", floor_table), (f"ceiling_design: {cap}", design)]
