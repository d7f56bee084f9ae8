"""Two cassettes' log-probability judgments of the same pairs, compared judgment by judgment.

``python -m saber_lib.validation.judge_report --other OTHER.jsonl --out OUT.md [--cassette REF.jsonl]``
reads the ``pairwise_judge_logprob`` answers that both cassettes hold for the same (query, pair,
order) - typically the recorded CPU run and :mod:`saber_lib.validation.judge_replay`'s answers of
another backend to exactly those requests - and writes a Markdown report:

* per order (:func:`order_table`): the margin log P("1") - log P("2") after the ``\\boxed{``
  prefill, the candidate it picks, and the seconds of each call;
* per pair (:func:`pair_table`): the margin summed over both orders (as ``llm.logprob_pairwise``
  reads it: positive favours candidate ``a``) and the verdict;
* the summary (:func:`summary`): verdict agreement over pairs and over single orders, the Pearson
  correlation of the margins, seconds per call and the other backend's load time.

Margins and verdicts come from :func:`saber_lib.validation.real_llm.judge_orders`, the section tables'
own reading of a cassette.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import polars as pl

from ..llm import load_cassette
from ..llm.types import LLMError
from . import real_llm
from ..report.tables import to_markdown
from .judge_replay import DEFAULT_CASSETTE, run_path

TEMPLATE = "pairwise_judge_logprob"
FLIP = {"a": "b", "b": "a", "tie": "tie"}


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson's r of two equally long series; ``nan`` with fewer than 2 finite pairs or no spread."""
    pts = [(a, b) for a, b in zip(x, y) if math.isfinite(a) and math.isfinite(b)]
    if len(pts) < 2:
        return float("nan")
    xs, ys = np.array(pts, dtype=float).T
    if xs.std() == 0 or ys.std() == 0:
        return float("nan")
    return float(np.corrcoef(xs, ys)[0, 1])


def _seconds(entries: Sequence[Mapping], template: str) -> dict[tuple, float]:
    out = {}
    for e in entries:
        meta = e.get("meta") or {}
        if e.get("template") == template and int(e.get("attempt") or 0) == 0 and "first" in meta:
            out.setdefault((meta.get("query"), meta["first"], meta["second"]), float(e.get("latency_s") or 0.0))
    return out


def pair_table(ref: Sequence[Mapping], other: Sequence[Mapping], template: str = TEMPLATE) -> pl.DataFrame:
    """One row per pair that both cassettes judged in both orders, oriented as ``ref`` first showed
    it: ``margin_ab_*`` / ``margin_ba_*`` (log P("1") - log P("2") with ``a`` shown first / second),
    ``margin_*`` (their evidence for ``a`` over both orders), ``verdict_*`` and ``agree``."""
    mine = real_llm.judge_orders(ref, template)
    theirs = real_llm.judge_orders(other, template).select("query_id", "a", "b", "margin_ab", "margin_ba", "verdict")
    swapped = theirs.rename({"a": "b", "b": "a", "margin_ab": "margin_ba", "margin_ba": "margin_ab"}).with_columns(
        pl.col("verdict").replace_strict(FLIP))
    theirs = pl.concat([theirs, swapped.select(theirs.columns)])
    both = mine.select("query_id", "a", "b", "margin_ab", "margin_ba", "verdict").join(
        theirs, on=["query_id", "a", "b"], how="inner", suffix="_other", maintain_order="left")
    return both.select(
        "query_id", "a", "b",
        pl.col("margin_ab").alias("margin_ab_ref"), pl.col("margin_ba").alias("margin_ba_ref"),
        (pl.col("margin_ab") - pl.col("margin_ba")).alias("margin_ref"), pl.col("verdict").alias("verdict_ref"),
        pl.col("margin_ab_other"), pl.col("margin_ba_other"),
        (pl.col("margin_ab_other") - pl.col("margin_ba_other")).alias("margin_other"), "verdict_other",
        (pl.col("verdict") == pl.col("verdict_other")).alias("agree"))


def order_table(ref: Sequence[Mapping], other: Sequence[Mapping], template: str = TEMPLATE) -> pl.DataFrame:
    """One row per pair and order (``ab``: ``a`` shown first): who was shown first and second, each
    cassette's margin log P("1") - log P("2"), the candidate it picks (``1``, ``2`` or ``tie``),
    the seconds of each call, and ``agree`` (same pick)."""
    secs = [_seconds(ref, template), _seconds(other, template)]
    rows = []
    for r in pair_table(ref, other, template).iter_rows(named=True):
        for order, first, second in (("ab", r["a"], r["b"]), ("ba", r["b"], r["a"])):
            margins = [r[f"margin_{order}_ref"], r[f"margin_{order}_other"]]
            picks = ["tie" if m == 0 or math.isnan(m) else "1" if m > 0 else "2" for m in margins]
            key = (r["query_id"], first, second)
            rows.append({"query_id": r["query_id"], "first": first, "second": second, "order": order,
                         "margin_ref": margins[0], "pick_ref": picks[0], "margin_other": margins[1],
                         "pick_other": picks[1], "s_ref": secs[0].get(key), "s_other": secs[1].get(key),
                         "agree": picks[0] == picks[1]})
    return pl.DataFrame(rows, schema={"query_id": pl.String, "first": pl.String, "second": pl.String,
                                      "order": pl.String, "margin_ref": pl.Float64, "pick_ref": pl.String,
                                      "margin_other": pl.Float64, "pick_other": pl.String, "s_ref": pl.Float64,
                                      "s_other": pl.Float64, "agree": pl.Boolean})


def summary(pairs: pl.DataFrame, orders: pl.DataFrame) -> dict:
    """Pairs and orders compared, verdict agreement (count and share) for both, Pearson's r of the
    pair margins and of the single-order margins, mean seconds per call of each cassette."""
    def share(k, n):
        return k / n if n else float("nan")

    def mean(col):
        vals = [v for v in orders[col].to_list() if v is not None]
        return sum(vals) / len(vals) if vals else float("nan")

    kp, ko = int(pairs["agree"].sum()), int(orders["agree"].sum())
    return {"pairs": pairs.height, "pair_agree": kp, "pair_agreement": share(kp, pairs.height),
            "orders": orders.height, "order_agree": ko, "order_agreement": share(ko, orders.height),
            "r_pair_margin": pearson(pairs["margin_ref"].to_list(), pairs["margin_other"].to_list()),
            "r_order_margin": pearson(orders["margin_ref"].to_list(), orders["margin_other"].to_list()),
            "s_per_call_ref": mean("s_ref"), "s_per_call_other": mean("s_other")}


def render_report(pairs: pl.DataFrame, orders: pl.DataFrame, names: tuple[str, str], *, what: str,
           header: Sequence[str], run: Mapping | None = None) -> str:
    """The report as Markdown: ``header`` lines, the summary, the per-pair and per-order tables
    with the two backends' names in the columns and ``what`` (the model, its weights) in the captions."""
    ref, oth = names
    s = summary(pairs, orders)
    lines = list(header) + [
        "", "## Summary", "",
        f"- pairs judged in both orders by both: {s['pairs']}; verdict over both orders agrees on "
        f"{s['pair_agree']}/{s['pairs']} ({s['pair_agreement']:.0%})",
        f"- single orders: the same candidate picked in {s['order_agree']}/{s['orders']} ({s['order_agreement']:.0%})",
        f"- Pearson r of the margins: {s['r_pair_margin']:.3f} over pairs (summed over both orders), "
        f"{s['r_order_margin']:.3f} over single orders",
        f"- seconds per call (one request, both options): {ref} {s['s_per_call_ref']:.2f}, {oth} {s['s_per_call_other']:.2f}",
    ]
    if run:
        lines.append(f"- {oth}: load {run.get('load_s', float('nan')):.1f} s, {run.get('requests')} requests "
                     f"in {run.get('calls_s', float('nan')):.1f} s, {run.get('failed')} failed")
    def rename(df: pl.DataFrame) -> pl.DataFrame:  # backend names in the headers; ids may hold "|"
        df = df.with_columns(pl.col(pl.String).str.replace_all("|", "\\|", literal=True))
        return df.rename({c: c.replace("_ref", f" {ref}").replace("_other", f" {oth}")
                          for c in df.columns if c.endswith(("_ref", "_other"))})
    lines += ["", "## Per pair", "", to_markdown(rename(pairs), caption=(
        f"Log-probability judge ({what}): margin = evidence for candidate a over both orders "
        f"(log P(a's number) - log P(the other's), summed), verdict a / b / tie; {ref} vs {oth} on the same prompts"))]
    lines += ["## Per order", "", to_markdown(rename(orders), caption=(
        f"Log-probability judge ({what}) per call: margin = log P(\"1\") - log P(\"2\") after the "
        f"\\boxed{{ prefill, pick = the number it favours, s = seconds of the call; {ref} vs {oth}"))]
    return "\n".join(lines).rstrip() + "\n"


def machine_lines(command: str) -> list[str]:
    """Date, machine and load lines of a benchmark result."""
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    return [f"- Date: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC",
            f"- Machine: {platform.machine()}, {os.cpu_count()} cores ({platform.processor() or platform.system()}), "
            f"shared with other jobs; load average (1/5/15 min) at the end: {load}",
            f"- Command: `{command}`"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m saber_lib.validation.judge_report", description=__doc__.splitlines()[0])
    ap.add_argument("--cassette", default=str(DEFAULT_CASSETTE), help="the reference (recorded) answers")
    ap.add_argument("--other", required=True, help="the other backend's answers (judge_replay --record)")
    ap.add_argument("--out", required=True, help="the Markdown file to write")
    ap.add_argument("--names", nargs=2, default=("llama.cpp", "vLLM"), metavar=("REF", "OTHER"))
    ap.add_argument("--what", required=True, help="the model and its weights, for the captions")
    ap.add_argument("--title", default="Log-probability judge: the same prompts through two backends")
    ap.add_argument("--command", default=" ".join(sys.argv), help="the command shown in the header")
    ap.add_argument("--note", action="append", default=[], help="a further header line (repeatable)")
    args = ap.parse_args(argv)
    try:
        ref, other = load_cassette(args.cassette), load_cassette(args.other)
    except LLMError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    pairs, orders = pair_table(ref, other), order_table(ref, other)
    if pairs.height == 0:
        print(f"error: {args.other} and {args.cassette} share no {TEMPLATE} pair judged in both orders", file=sys.stderr)
        return 2
    rp = run_path(args.other)
    run = json.loads(rp.read_text()) if rp.is_file() else None
    header = [f"# {args.title}", ""] + machine_lines(args.command) + [f"- {n}" for n in args.note]
    text = render_report(pairs, orders, tuple(args.names), what=args.what, header=header, run=run)
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
