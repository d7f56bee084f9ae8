"""``saber plan``: the expected wall time of a profile on N GPUs, from the measured per-stage figures
of the paper-scale rehearsal (``benchmarks/bench_paper_scale.py``, committed as
``benchmarks/results/paper_scale.json``) and a given judge throughput.

For every stage in the figures' ``projection`` (each fitted as ``cpu_s = coef * units^slope``
over its measured sizes, ``units`` its count of work):

* the profile's units: judgments = ``select.n_queries x floor(3 K / 2) x tournament.rounds``
  (twice with ``tournament.position_swap``), queries = ``select.n_queries`` (evaluate: times the
  share of the three settings the profile keeps), problems = the figures' corpus size (the
  profile names sources, not a count);
* the workbench's time: ``coef * units^slope`` CPU seconds on one core (its drivers are serial),
  divided by ``--cpus`` for the stages that spread over cores (:data:`PARALLEL`: signals);
* the judge's time (LLM stages): ``llm_calls / (gpus x rate)``, where ``llm_calls`` is the
  units times the measured calls per unit (retries included) and ``rate`` the stage's own calls per
  second per GPU (``--rate summaries=R``: a summary or a topic score is not a judgment's length),
  else the judge's rate (``--judge-rate``);
* the tournament's figures: those of ``tournament_swap`` (every pair asked in both orders) for a
  profile with ``tournament.position_swap``, else those of ``tournament``; the other set is left out;
* the stage's time: the larger of the two (the client overlaps its own work with the judge's), and
  what bounds it. The total is the sum over the stages; the bounding stage the longest one.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from ..core import config

DEFAULT_FIGURES = "benchmarks/results/paper_scale.json"
#: stages of a paper run that the rehearsal has no figures for yet: named under the table, not planned
NOT_REHEARSED = ("topics", "summaries", "signals", "select")
#: stages whose work spreads over the cores of the run (``signals.workers``, a process pool or Dask)
PARALLEL = ("signals",)


class PlanError(ValueError):
    """A bad flag or figures file: the message names it (one line)."""


@dataclass
class StagePlan:
    stage: str
    unit: str
    units: float
    llm_calls: float
    workbench_h: float
    judge_h: float

    @property
    def hours(self) -> float:
        return max(self.workbench_h, self.judge_h)

    @property
    def bound(self) -> str:
        return "judge (GPUs)" if self.judge_h > self.workbench_h else "workbench CPU"


def _positive(flag: str, value, kind=float) -> float:
    try:
        x = kind(value)
    except (TypeError, ValueError):
        raise PlanError(f"{flag}: expected a positive {'integer' if kind is int else 'number'}, got {value!r}") from None
    if not (x > 0 and math.isfinite(x)):
        raise PlanError(f"{flag}: expected a positive {'integer' if kind is int else 'number'}, got {value!r}")
    return x


def load_figures(path) -> dict:
    p = Path(path)
    if not p.is_file():
        raise PlanError(f"--figures: {p} not found (write it with benchmarks/bench_paper_scale.py --out)")
    try:
        fig = json.loads(p.read_text())
        proj = fig["projection"]
        for s, f in proj.items():
            for k in ("unit", "units", "cpu_s_coef", "cpu_s_slope", "llm_calls"):
                f[k]
    except (ValueError, KeyError, TypeError) as e:
        raise PlanError(f"--figures: {p} is not a paper-scale figures file (missing {e})") from None
    return proj


def figures_source(path) -> str:
    """The line that says where a plan's workbench figures come from: the file, when it was measured,
    and that its LLM answers were the project's mock server's (the GPUs' time is the rates given)."""
    date = json.loads(Path(path).read_text()).get("date", "date not recorded")
    return (f"workbench figures: {path} (measured {date}; LLM answers from the project's mock server, "
            f"so the GPU hours come from the rates given here, not from a model)")


def profile_units(profile) -> dict[str, float]:
    """Units of work of each stage for a loaded profile (module doc)."""
    sel, tour, thr = profile.section("select"), profile.section("tournament"), profile.section("thresholds")
    ev = profile.section("evaluate")
    q = sel["n_queries"]
    judgments = q * (3 * thr["K"] // 2) * tour["rounds"] * (2 if tour["position_swap"] else 1)
    return {"judgments": judgments, "queries": q, "evaluate_share": len(ev["settings"]) / 3,
            "position_swap": bool(tour["position_swap"])}


def _tournament_figures(figures: dict, swap: bool) -> dict:
    """The figures without the tournament set the profile does not run (module doc)."""
    keep = "tournament_swap" if swap and "tournament_swap" in figures else "tournament"
    return {s: f for s, f in figures.items() if not (s.startswith("tournament") and s != keep)}


def plan(figures: dict, units: dict, gpus: int, judge_rate: float, rates: dict | None = None,
         cpus: int = 1) -> list[StagePlan]:
    """One row per stage of ``figures``; ``rates``: calls per second per GPU of named LLM stages
    (the others at ``judge_rate``); ``cpus``: cores of the stages in :data:`PARALLEL`."""
    out = []
    rates = rates or {}
    for stage, f in _tournament_figures(figures, units.get("position_swap", False)).items():
        if f["unit"] == "judgments":
            u = units["judgments"]
        elif f["unit"] == "queries":
            u = units["queries"]
        else:
            u = f["units"]
        cpu = f["cpu_s_coef"] * u ** f["cpu_s_slope"]
        if stage == "evaluate":
            cpu *= units.get("evaluate_share", 1.0)
        if stage in PARALLEL:
            cpu /= cpus
        calls = f["llm_calls"] / f["units"] * u if f["llm_calls"] else 0.0
        rate = rates.get(stage, judge_rate)
        out.append(StagePlan(stage, f["unit"], u, calls, cpu / 3600, calls / (gpus * rate) / 3600))
    return out


def table(rows: list[StagePlan], gpus: int, judge_rate: float, rates: dict | None = None, cpus: int = 1) -> str:
    lines = [f"{'stage':<12} {'units':>22} {'LLM calls':>12} {'workbench h':>12} {'judge h':>10} {'expected h':>11}  bound",
             "-" * 96]
    for r in rows:
        lines.append(f"{r.stage:<12} {f'{r.units:,.0f} {r.unit}':>22} {r.llm_calls:>12,.0f} {r.workbench_h:>12.3f} "
                     f"{r.judge_h:>10.2f} {r.hours:>11.2f}  {r.bound}")
    total = sum(r.hours for r in rows)
    top = max(rows, key=lambda r: r.hours) if rows else None
    lines += ["-" * 96, f"{'total':<12} {'':>22} {sum(r.llm_calls for r in rows):>12,.0f} "
              f"{sum(r.workbench_h for r in rows):>12.3f} {sum(r.judge_h for r in rows):>10.2f} {total:>11.2f}",
              f"{gpus} GPUs at {judge_rate:g} judgments/s per GPU"
              + "".join(f", {s} at {r:g} calls/s per GPU" for s, r in sorted((rates or {}).items()))
              + f"; {', '.join(PARALLEL)} on {cpus} core{'s' if cpus > 1 else ''}"
              + "; bounded by "
              + (f"{top.stage} ({top.bound})" if top else "nothing")]
    missing = [s for s in NOT_REHEARSED if s not in {r.stage for r in rows}]
    if missing:
        lines.append(f"not planned (no rehearsal figures): {', '.join(missing)}")
    return "\n".join(lines)


def add_parser(sub) -> None:
    """The ``plan`` subcommand's options (values are checked by :func:`run`, one line per bad flag)."""
    p = sub.add_parser("plan", help="expected wall time of a profile on N GPUs from the paper-scale figures")
    p.add_argument("--params", required=True, help="parameter profile, e.g. params/paper.yaml")
    p.add_argument("--gpus", required=True, help="number of GPUs serving the judge")
    p.add_argument("--judge-rate", required=True, help="judgments per second per GPU")
    p.add_argument("--rate", action="append", default=[], metavar="STAGE=R",
                   help="calls per second per GPU of another LLM stage (repeatable, e.g. summaries=0.5); "
                        "default: the judge's rate")
    p.add_argument("--cpus", default="1", help=f"cores for the stages that spread over cores ({', '.join(PARALLEL)}); "
                                               "default 1")
    p.add_argument("--figures", default=DEFAULT_FIGURES, help=f"per-stage figures (default {DEFAULT_FIGURES})")


def run(args) -> str:
    gpus = int(_positive("--gpus", args.gpus, int))
    rate = _positive("--judge-rate", args.judge_rate)
    if not Path(args.params).is_file():
        raise PlanError(f"--params: {args.params} not found")
    figures = load_figures(args.figures)
    rates = stage_rates(args.rate, figures)
    cpus = int(_positive("--cpus", args.cpus, int))
    units = profile_units(config.load_profile(args.params))
    return figures_source(args.figures) + "\n" + table(plan(figures, units, gpus, rate, rates, cpus), gpus, rate,
                                                        rates, cpus)


def stage_rates(values, figures: dict) -> dict[str, float]:
    """``--rate STAGE=R`` flags as {stage: R}; a stage the figures do not hold, or without LLM
    calls, is an error naming the flag."""
    out = {}
    llm = sorted(s for s, f in figures.items() if f["llm_calls"])
    for v in values:
        stage, eq, r = str(v).partition("=")
        if not eq:
            raise PlanError(f"--rate: expected STAGE=R, got {v!r}")
        if stage not in llm:
            raise PlanError(f"--rate: {stage!r} is not an LLM stage of the figures (one of {', '.join(llm)})")
        out[stage] = _positive(f"--rate {stage}", r)
    return out
