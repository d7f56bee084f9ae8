"""``saber plan``: the expected wall time of a profile on N GPUs, from the measured per-stage figures
of the paper-scale rehearsal (``benchmarks/bench_paper_scale.py``, committed as
``benchmarks/results/paper_scale.json``) and a given judge throughput.

For every stage in the figures' ``projection`` (each fitted as ``cpu_s = coef * units^slope``
over its measured sizes, ``units`` its count of work):

* the profile's own units: judgments = ``select.n_queries x floor(3 K / 2) x tournament.rounds``
  (twice with ``tournament.position_swap``), queries = ``select.n_queries`` (evaluate: times the
  share of the three settings the profile keeps), problems = the records the profile's corpus
  sources hold in the data directory (at most ``corpus.max_records_per_source`` each; ``--problems N``
  for another corpus, e.g. the paper's 283,000), capped for topics and summaries by their
  ``*_max_problems``;
* the workbench's time: ``coef * units^slope`` CPU seconds on one core (its drivers are serial),
  divided by ``--cpus`` for the stages that spread over cores (:data:`PARALLEL`: signals);
* the judge's time, for the stages that call the LLM under the profile (:func:`llm_stages`: the
  tournament with ``tournament.judge: llm``, topics with ``topics.topic_scorer: llm`` or an LLM
  sample, summaries likewise; none with ``llm.backend: none``): ``llm_calls / (gpus x rate)``,
  where ``llm_calls`` is the LLM units times the measured calls per unit (retries included) and
  ``rate`` the stage's own calls per second per GPU (``--rate summaries=R``), else the judge's
  rate (``--judge-rate``);
* the tournament's figures: those of ``tournament_swap`` (every pair asked in both orders) for a
  profile with ``tournament.position_swap``, else those of ``tournament``; the other set is left out;
* the stage's time: the larger of the two (the client overlaps its own work with the judge's), and
  what bounds it; whether the units lie within the sizes the rehearsal measured (``sizes``) or are
  extrapolated from the nearest one. The total is the sum over the planned stages; every stage of
  the pipeline without figures is named under the table (its hours are not in the total).

The figures file is checked before anything is planned: each stage's ``unit`` a known unit,
``units`` positive, ``cpu_s_coef`` and ``llm_calls`` finite and not negative, ``cpu_s_slope`` finite
in ``[0, MAX_SLOPE]``, ``sizes`` positive numbers; a bad one is one error naming its key.
"""
from __future__ import annotations

import argparse

import json
import math
from dataclasses import dataclass
from pathlib import Path

from ..core import config
from ..corpus.loaders import load_source
from .stages import STAGES

DEFAULT_FIGURES = "benchmarks/results/paper_scale.json"
#: stages whose work spreads over the cores of the run (``signals.workers``, a process pool or Dask)
PARALLEL = ("signals",)
UNITS = ("judgments", "queries", "problems")
#: the steepest growth a fit may claim (work ~ units^4 already makes any paper-size plan meaningless)
MAX_SLOPE = 4.0
#: figures named after the work they measure, and the pipeline stage that does it
STAGE_OF = {"dedup": "corpus", "tournament_swap": "tournament"}
#: the largest --gpus / --cpus taken at face value
MAX_COUNT = 1_000_000


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
    basis: str = ""

    @property
    def hours(self) -> float:
        return max(self.workbench_h, self.judge_h)

    @property
    def bound(self) -> str:
        return "judge (GPUs)" if self.judge_h > self.workbench_h else "workbench CPU"


def _positive(flag: str, value, kind=float) -> float:
    what = f"a positive {'integer' if kind is int else 'number'}" + (f" up to {MAX_COUNT:,}" if kind is int else "")
    try:
        x = kind(value)
        ok = x > 0 and math.isfinite(x) and (kind is not int or x <= MAX_COUNT)
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise PlanError(f"{flag}: expected {what}, got {value!r}")
    return x


def _number(fig: str, key: str, value, low: float = 0.0, high: float = math.inf, strict: bool = False) -> float:
    """A figure that must be a finite number in [low, high] (``strict``: above low)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PlanError(f"--figures {fig}: {key}: expected a number, got {value!r}")
    try:
        x = float(value)
    except OverflowError:
        x = math.inf
    if not math.isfinite(x) or x < low or x > high or (strict and x <= low):
        bound = f"above {low:g}" if strict else f"at least {low:g}"
        raise PlanError(f"--figures {fig}: {key}: expected a finite number {bound}"
                        + (f" and at most {high:g}" if math.isfinite(high) else "") + f", got {value!r}")
    return x


def load_figures(path) -> dict:
    """The ``projection`` of a figures file, every figure checked (module doc)."""
    p = Path(path)
    if not p.is_file():
        raise PlanError(f"--figures: {p} not found (write it with benchmarks/bench_paper_scale.py --out)")
    try:
        fig = json.loads(p.read_text())
    except (ValueError, OSError) as e:
        raise PlanError(f"--figures: {p} is not a readable JSON file ({e})") from None
    proj = fig.get("projection") if isinstance(fig, dict) else None
    if not isinstance(proj, dict):
        raise PlanError(f"--figures {p}: projection: expected an object of stages, got "
                        f"{type(proj).__name__ if proj is not None else 'nothing'}")
    out = {}
    for stage, f in proj.items():
        key = f"projection.{stage}"
        if not isinstance(f, dict):
            raise PlanError(f"--figures {p}: {key}: expected an object of figures, got {type(f).__name__}")
        missing = [k for k in ("unit", "units", "cpu_s_coef", "cpu_s_slope", "llm_calls") if k not in f]
        if missing:
            raise PlanError(f"--figures {p}: {key}: missing {', '.join(missing)}")
        if f["unit"] not in UNITS:
            raise PlanError(f"--figures {p}: {key}.unit: expected one of {', '.join(UNITS)}, got {f['unit']!r}")
        sizes = f.get("sizes", [])
        if not isinstance(sizes, list):
            raise PlanError(f"--figures {p}: {key}.sizes: expected a list of sizes, got {type(sizes).__name__}")
        out[stage] = {"unit": f["unit"], "units": _number(p, f"{key}.units", f["units"], strict=True),
                      "cpu_s_coef": _number(p, f"{key}.cpu_s_coef", f["cpu_s_coef"]),
                      "cpu_s_slope": _number(p, f"{key}.cpu_s_slope", f["cpu_s_slope"], high=MAX_SLOPE),
                      "llm_calls": _number(p, f"{key}.llm_calls", f["llm_calls"]),
                      "sizes": [_number(p, f"{key}.sizes[{i}]", x, strict=True) for i, x in enumerate(sizes)]}
    return out


def figures_source(path) -> str:
    """The line that says where a plan's workbench figures come from: the file, when it was measured,
    and that its LLM answers were the project's mock server's (the GPUs' time is the rates given)."""
    date = json.loads(Path(path).read_text()).get("date", "date not recorded")
    return (f"workbench figures: {path} (measured {date}; LLM answers from the project's mock server, "
            f"so the GPU hours come from the rates given here, not from a model)")


def corpus_problems(profile) -> int:
    """The records the profile's corpus stage reads: every source's records in the data directory,
    at most ``corpus.max_records_per_source`` each (before deduplication)."""
    corpus = profile.section("corpus")
    data_dir = profile.section("run")["data_dir"]
    return sum(len(load_source(s, data_dir, corpus["max_records_per_source"],
                               allow_empty=corpus["allow_empty_sources"]).records) for s in corpus["sources"])


def llm_stages(profile) -> dict[str, float | None]:
    """The stages that call the LLM under the profile: stage -> the problems it sends (None: all its
    units). Empty with ``llm.backend: none``."""
    if profile.section("llm")["backend"] == "none":
        return {}
    top, summ, tour = profile.section("topics"), profile.section("summaries"), profile.section("tournament")
    out: dict[str, float | None] = {}
    for stage, sec, scorer, key in (("topics", top, "topic_scorer", "topic_llm_sample"),
                                    ("summaries", summ, "summarizer", "summary_llm_sample")):
        if sec[scorer] == "llm":
            out[stage] = None
        elif sec.get(key, 0) > 0:
            out[stage] = float(sec[key])
    if tour["judge"] == "llm":
        out["tournament"] = out["tournament_swap"] = None
    return out


def profile_units(profile, problems: int | None = None) -> dict:
    """Units of work of each stage for a loaded profile (module doc); ``problems``: the corpus size
    (None: :func:`corpus_problems`)."""
    sel, tour, thr = profile.section("select"), profile.section("tournament"), profile.section("thresholds")
    ev = profile.section("evaluate")
    q = sel["n_queries"]
    judgments = q * (3 * thr["K"] // 2) * tour["rounds"] * (2 if tour["position_swap"] else 1)
    n = corpus_problems(profile) if problems is None else problems
    caps = {"topics": profile.section("topics")["topic_max_problems"],
            "summaries": profile.section("summaries")["summary_max_problems"]}
    return {"judgments": judgments, "queries": q, "problems": n, "evaluate_share": len(ev["settings"]) / 3,
            "position_swap": bool(tour["position_swap"]), "llm_stages": llm_stages(profile),
            "problem_caps": {s: c for s, c in caps.items() if c > 0}}


def _tournament_figures(figures: dict, swap: bool) -> dict:
    """The figures without the tournament set the profile does not run (module doc)."""
    keep = "tournament_swap" if swap and "tournament_swap" in figures else "tournament"
    return {s: f for s, f in figures.items() if not (s.startswith("tournament") and s != keep)}


def basis(units: float, sizes) -> str:
    """Whether ``units`` lies within the measured sizes, or how far it is extrapolated and from which."""
    if not sizes:
        return "fit only (sizes not recorded)"
    lo, hi = min(sizes), max(sizes)
    if lo <= units <= hi:
        return f"measured {lo:,.0f}-{hi:,.0f}" if lo < hi else f"measured at {hi:,.0f}"
    near = hi if units > hi else lo
    return f"extrapolated x{units / near:#.3g} from {near:,.0f}"


def plan(figures: dict, units: dict, gpus: int, judge_rate: float, rates: dict | None = None,
         cpus: int = 1) -> list[StagePlan]:
    """One row per stage of ``figures``; ``rates``: calls per second per GPU of named LLM stages
    (the others at ``judge_rate``); ``cpus``: cores of the stages in :data:`PARALLEL`. ``units``
    (:func:`profile_units`) may leave out ``problems`` (the figures' own size is planned),
    ``llm_stages`` (every stage with measured calls calls the LLM) and ``problem_caps``."""
    out = []
    rates = rates or {}
    llm = units.get("llm_stages")
    for stage, f in _tournament_figures(figures, units.get("position_swap", False)).items():
        u = units.get(f["unit"], f["units"]) if f["unit"] in UNITS else f["units"]
        u = min(u, units.get("problem_caps", {}).get(stage, u))
        try:
            cpu = f["cpu_s_coef"] * float(u) ** f["cpu_s_slope"]
        except OverflowError:
            cpu = math.inf
        if not math.isfinite(cpu):
            raise PlanError(f"projection.{stage}: cpu_s_coef x units^cpu_s_slope is not a finite number of seconds "
                            f"at {u:,.0f} {f['unit']}")
        if stage == "evaluate":
            cpu *= units.get("evaluate_share", 1.0)
        if stage in PARALLEL:
            cpu /= cpus
        asked = u if llm is None or llm.get(stage) is None else min(u, llm[stage])
        calls = f["llm_calls"] / f["units"] * asked if f["llm_calls"] and (llm is None or stage in llm) else 0.0
        rate = rates.get(stage, judge_rate)
        out.append(StagePlan(stage, f["unit"], u, calls, cpu / 3600, calls / (gpus * rate) / 3600,
                             basis(u, f.get("sizes"))))
    return out


def unplanned(rows: list[StagePlan]) -> list[str]:
    """The pipeline's stages that have no row (no figures), in pipeline order."""
    have = {STAGE_OF.get(r.stage, r.stage) for r in rows}
    return [s.name for s in STAGES if s.name not in have]


def table(rows: list[StagePlan], gpus: int, judge_rate: float, rates: dict | None = None, cpus: int = 1) -> str:
    lines = [f"{'stage':<12} {'units':>22} {'LLM calls':>12} {'workbench h':>12} {'judge h':>10} {'expected h':>11}  "
             f"{'bound':<14} figures", "-" * 128]
    for r in rows:
        lines.append(f"{r.stage:<12} {f'{r.units:,.0f} {r.unit}':>22} {r.llm_calls:>12,.0f} {r.workbench_h:>12.3f} "
                     f"{r.judge_h:>10.2f} {r.hours:>11.2f}  {r.bound:<14} {r.basis}")
    total = sum(r.hours for r in rows)
    top = max(rows, key=lambda r: r.hours) if rows else None
    lines += ["-" * 128, f"{'total':<12} {'':>22} {sum(r.llm_calls for r in rows):>12,.0f} "
              f"{sum(r.workbench_h for r in rows):>12.3f} {sum(r.judge_h for r in rows):>10.2f} {total:>11.2f}",
              f"{gpus} GPUs at {judge_rate:g} judgments/s per GPU"
              + "".join(f", {s} at {r:g} calls/s per GPU" for s, r in sorted((rates or {}).items()))
              + f"; {', '.join(PARALLEL)} on {cpus} core{'s' if cpus > 1 else ''}"
              + "; bounded by "
              + (f"{top.stage} ({top.bound})" if top else "nothing")]
    missing = unplanned(rows)
    if missing:
        lines.append(f"not planned (no rehearsal figures; not in the total): {', '.join(missing)}")
    return "\n".join(lines)


def add_parser(sub) -> None:
    """The ``plan`` subcommand's options (values are checked by :func:`run`, one line per bad flag)."""
    what = "expected wall time of a profile on N GPUs from the paper-scale figures"
    p = sub.add_parser("plan", help=what, description=what, formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="example:\n  saber plan --params params/paper.yaml --gpus 8 --judge-rate 2.5")
    p.add_argument("--params", required=True, help="parameter profile, e.g. params/paper.yaml")
    p.add_argument("--gpus", required=True, help="number of GPUs serving the judge")
    p.add_argument("--judge-rate", required=True, help="judgments per second per GPU")
    p.add_argument("--rate", action="append", default=[], metavar="STAGE=R",
                   help="calls per second per GPU of another LLM stage (repeatable, e.g. summaries=0.5); "
                        "default: the judge's rate")
    p.add_argument("--cpus", default="1", help=f"cores for the stages that spread over cores ({', '.join(PARALLEL)}); "
                                               "default 1")
    p.add_argument("--figures", default=DEFAULT_FIGURES, help=f"per-stage figures (default {DEFAULT_FIGURES})")
    p.add_argument("--problems", default=None,
                   help="problems of the corpus to plan (default: the records the profile's sources hold in the "
                        "data directory; e.g. 283000 for the paper's corpus)")


def run(args) -> str:
    gpus = int(_positive("--gpus", args.gpus, int))
    rate = _positive("--judge-rate", args.judge_rate)
    if not Path(args.params).is_file():
        raise PlanError(f"--params: {args.params} not found")
    figures = load_figures(args.figures)
    rates = stage_rates(args.rate, figures)
    cpus = int(_positive("--cpus", args.cpus, int))
    problems = None if args.problems is None else int(_positive("--problems", args.problems, int))
    profile = config.load_profile(args.params)
    units = profile_units(profile, problems)
    rows = plan(figures, units, gpus, rate, rates, cpus)
    if not rows:
        raise PlanError(f"--figures {args.figures}: no stage has figures (projection is empty)")
    llm = sorted(s for s in units["llm_stages"] if s != "tournament_swap")
    head = (f"{profile.path.name}: {units['problems']:,} problems ("
            + ("--problems" if problems is not None else "the records its sources hold")
            + f"), {units['queries']:,} queries, {units['judgments']:,} judgments; LLM stages: "
            + (", ".join(llm) if llm else "none (no judge hours)"))
    return figures_source(args.figures) + "\n" + head + "\n" + table(rows, gpus, rate, rates, cpus)


def stage_rates(values, figures: dict) -> dict[str, float]:
    """``--rate STAGE=R`` flags as {stage: R}; a stage the figures do not hold, or without LLM
    calls, or named twice, is an error naming the flag."""
    out = {}
    llm = sorted(s for s, f in figures.items() if f["llm_calls"])
    for v in values:
        stage, eq, r = str(v).partition("=")
        if not eq:
            raise PlanError(f"--rate: expected STAGE=R, got {v!r}")
        if stage not in llm:
            raise PlanError(f"--rate: {stage!r} is not an LLM stage of the figures (one of {', '.join(llm)})")
        if stage in out:
            raise PlanError(f"--rate: {stage} is given twice ({stage}={out[stage]:g} and {v}): give each stage once")
        out[stage] = _positive(f"--rate {stage}", r)
    return out
