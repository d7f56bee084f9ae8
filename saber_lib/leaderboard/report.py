"""Leaderboard and pairwise tables, Markdown/LaTeX, forest plot and p-value heat map.

Frames (polars):

- leaderboard: ``system``, ``task``, ``scope`` (``Overall`` or a domain), ``mean``, ``ci_low``,
  ``ci_high``, ``n_queries`` (scored), ``n_missing`` (not scored), ``coverage`` (``n_queries`` over
  the scope's queries), ``rank`` (1 = best mean of the scope; ties share the best rank; null for a
  system whose coverage is below ``min_coverage``: its mean is over other queries than the ranked
  systems' means, so it is listed apart, :func:`unranked_table`).
- pairwise: ``task``, ``a``, ``b`` (a has the higher overall mean), ``n_common``, ``mean_diff``
  (a - b over the queries both scored), ``diff_low``, ``diff_high`` (paired bootstrap),
  ``p_value`` (paired sign-flip test), ``p_adjusted`` (Holm over all pairs of the task), ``test``.

Pairwise tests are on the overall scope (every query both systems scored; the tables state how
many). Group letters are drawn among the ranked systems only.
"""
from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import matplotlib.pyplot as plt
import polars as pl
import seaborn as sns
from tqdm.auto import tqdm

from ..metrics.resample import sign_flip_exact
from ..report.figures import save_figure
from ..report.tables import cell_text, to_latex, to_markdown
from . import stats as st
from .scopes import OVERALL, ordered_domains, scope_masks
from .published import System

LB_COLUMNS = {"system": "Utf8", "task": "Utf8", "scope": "Utf8", "mean": "Float64", "ci_low": "Float64",
              "ci_high": "Float64", "n_queries": "Int64", "n_missing": "Int64", "coverage": "Float64", "rank": "Int64"}
MIN_COVERAGE = 0.95   # default least share of a task's queries a system must score to be ranked


def _schema(cols: dict) -> dict:

    return {k: getattr(pl, v) for k, v in cols.items()}


@dataclass
class Provenance:
    """What a leaderboard was computed from; every output file carries :meth:`caption`."""

    published_files: list[str] = field(default_factory=list)
    run_dirs: list[str] = field(default_factory=list)
    ci_scheme: str = "correct"
    n_resamples: int = st.AUTHORS_RESAMPLES
    seed: int = 0
    alpha: float = 0.05
    skipped: list[str] = field(default_factory=list)
    min_coverage: float = MIN_COVERAGE

    def caption(self) -> str:
        names = sorted({Path(f).name for f in self.published_files})
        dirs = sorted({str(Path(f).parent.parent) for f in self.published_files})
        parts = [f"Published result files ({', '.join(dirs) if dirs else '-'}): {', '.join(names) if names else 'none'}",
                 f"workbench runs: {', '.join(self.run_dirs) if self.run_dirs else 'none'}",
                 f"{self.ci_scheme} bootstrap scheme, {self.n_resamples} resamples, seed {self.seed}",
                 f"paired sign-flip test ({self.n_resamples} sign draws, or every sign pattern when there are fewer) on "
                 f"the queries both systems scored, "
                 f"Holm-adjusted, alpha {self.alpha}",
                 f"systems that scored under {self.min_coverage:.0%} of the queries are not ranked (listed apart)"]
        if self.skipped:
            parts.append(f"skipped failed reports: {'; '.join(self.skipped)}")
        return "; ".join(parts) + "."

    def to_dict(self) -> dict:
        return {"published_files": self.published_files, "run_dirs": self.run_dirs, "ci_scheme": self.ci_scheme,
                "n_resamples": self.n_resamples, "seed": self.seed, "alpha": self.alpha, "skipped": self.skipped,
                "min_coverage": self.min_coverage}


# ----------------------------------------------------------------------------- frames
def _matrix(systems: Sequence[System], task: str) -> np.ndarray:
    missing = [s for s in systems if task not in s.scores]
    if missing:
        raise KeyError(f"{missing[0].source}: system {missing[0].name} has no task {task!r}")
    return np.array([s.scores[task] for s in systems], dtype=np.float64)


def leaderboard_frame(systems: Sequence[System], tasks: Sequence[str], ci_scheme: str = "correct",
                      n_resamples: int | None = None, seed: int = 0, level: float = 0.95, progress: bool = False,
                      min_coverage: float = MIN_COVERAGE):
    """One row per (system, task, scope). ``systems`` must be aligned (same queries and domains).
    ``rank`` is given per (task, scope) to the systems whose coverage is at least ``min_coverage``."""

    rows = []
    if not systems:
        return pl.DataFrame(schema=_schema(LB_COLUMNS))
    masks = scope_masks(systems[0].domains, ordered_domains(systems[0].domains))

    for task in tasks:
        X = _matrix(systems, task)
        for scope, m in tqdm(masks.items(), desc=f"intervals {task}", disable=not progress, leave=False):
            res = st.bootstrap_intervals(X[:, m], ci_scheme, scope == OVERALL, n_resamples, seed, (task, scope), level)
            for s, r in zip(systems, res):
                n_scope = r["n_queries"] + r["n_missing"]
                rows.append({"system": s.name, "task": task, "scope": scope, "mean": r["mean"],
                             "ci_low": r["ci_low"], "ci_high": r["ci_high"], "n_queries": r["n_queries"],
                             "n_missing": r["n_missing"], "coverage": r["n_queries"] / n_scope if n_scope else 0.0,
                             "rank": None})
            _rank(rows[-len(systems):], min_coverage)
    return pl.DataFrame(rows, schema=_schema(LB_COLUMNS))


def _rank(rows: list[dict], min_coverage: float) -> None:
    """Competition ranks (1, 2, 2, 4) by descending mean, in place, for the rows that cover enough."""
    ok = [r for r in rows if r["coverage"] >= min_coverage and r["mean"] == r["mean"]]
    for r in ok:
        r["rank"] = 1 + sum(o["mean"] > r["mean"] for o in ok)


def pairwise_frame(systems: Sequence[System], tasks: Sequence[str], n_resamples: int | None = None,
                   seed: int = 0, level: float = 0.95, progress: bool = False):
    """Every pair of systems per task (overall scope); ``a`` is the one with the higher mean."""

    R = int(n_resamples or st.AUTHORS_RESAMPLES)
    rows = []
    for task in tasks:
        X = _matrix(systems, task)
        with np.errstate(invalid="ignore"):
            means = np.array([np.nanmean(x) if (~np.isnan(x)).any() else -np.inf for x in X])
        order = sorted(range(len(systems)), key=lambda i: (-means[i], systems[i].name))
        names = [systems[i].name for i in order]
        res = st.pairwise_tests(X[order], names, R, seed, (task,), level, progress=progress)
        method = (f"exact over all 2^{X.shape[1]} sign patterns" if sign_flip_exact(X.shape[1], R)
                  else f"{R} Monte-Carlo draws (Hoeffding bound where smaller)")
        for i in range(len(res["a"])):
            rows.append({"task": task, "a": res["a"][i], "b": res["b"][i], "n_common": int(res["n_common"][i]),
                         "mean_diff": float(res["mean_diff"][i]), "diff_low": float(res["diff_low"][i]),
                         "diff_high": float(res["diff_high"][i]), "p_value": float(res["p_value"][i]),
                         "p_adjusted": float(res["p_adjusted"][i]),
                         "test": f"paired sign-flip, two-sided, {method}; Holm over {len(res['a'])} pairs"})
    schema = {"task": pl.Utf8, "a": pl.Utf8, "b": pl.Utf8, "n_common": pl.Int64, "mean_diff": pl.Float64,
              "diff_low": pl.Float64, "diff_high": pl.Float64, "p_value": pl.Float64, "p_adjusted": pl.Float64,
              "test": pl.Utf8}
    return pl.DataFrame(rows, schema=schema)


def letters(lb, pw, task: str, alpha: float = 0.05) -> dict[str, str]:
    """Compact letter display of the task's overall means (shared letter = not significantly
    different after Holm at ``alpha``)."""

    o = lb.filter((pl.col("task") == task) & (pl.col("scope") == OVERALL) & pl.col("rank").is_not_null())
    ranked = set(o["system"].to_list())
    sig = pw.filter((pl.col("task") == task) & (pl.col("p_adjusted") < alpha))
    diff = {frozenset((a, b)) for a, b in sig.select("a", "b").iter_rows() if a in ranked and b in ranked}
    return st.compact_letters(o["system"].to_list(), o["mean"].to_list(), diff)


def n_significant(pw, task: str | None = None, alpha: float = 0.05) -> int:

    sub = pw if task is None else pw.filter(pl.col("task") == task)
    return int(sub.filter(pl.col("p_adjusted") < alpha).height)


def display_table(lb, pw, task: str, alpha: float = 0.05, digits: int = 3):
    """Ranked systems (best first) x (Overall ``mean [lo, hi]``, group letters, scored queries,
    coverage, per-domain means). Systems without an overall rank are in :func:`unranked_table`."""

    sub = lb.filter(pl.col("task") == task)
    L = letters(lb, pw, task, alpha)
    o = sub.filter((pl.col("scope") == OVERALL) & pl.col("rank").is_not_null()).sort("rank", "system")
    scopes = [s for s in sub["scope"].unique(maintain_order=True).to_list() if s != OVERALL]
    f = "{:.%df}" % digits
    rows = []
    for r in o.iter_rows(named=True):
        row = {"rank": str(r["rank"]), "system": r["system"],
               "Overall [95% CI]": f"{f.format(r['mean'])} [{f.format(r['ci_low'])}, {f.format(r['ci_high'])}]",
               "group": L.get(r["system"], ""), "n": str(r["n_queries"]), "coverage": f.format(r["coverage"])}
        per = {s: m for s, m in sub.filter(pl.col("system") == r["system"]).select("scope", "mean").iter_rows()}
        for s in scopes:
            row[s] = f.format(per[s]) if per.get(s) is not None and per[s] == per[s] else "-"
        rows.append(row)
    return pl.DataFrame(rows)


def unranked_table(lb, task: str, digits: int = 3):
    """The systems of ``task`` without an overall rank: coverage, scored queries, and their mean over
    those queries only (not comparable with the ranked means). Empty when every system is ranked."""

    o = lb.filter((pl.col("task") == task) & (pl.col("scope") == OVERALL) & pl.col("rank").is_null())
    f = "{:.%df}" % digits
    return pl.DataFrame([{"system": r["system"], "coverage": f.format(r["coverage"]),
                          "n": f"{r['n_queries']} of {r['n_queries'] + r['n_missing']}",
                          "mean of its scored queries [95% CI]": "-" if r["mean"] != r["mean"] else
                          f"{f.format(r['mean'])} [{f.format(r['ci_low'])}, {f.format(r['ci_high'])}]"}
                         for r in o.sort("coverage", "system", descending=[True, False]).iter_rows(named=True)],
                        schema={"system": pl.Utf8, "coverage": pl.Utf8, "n": pl.Utf8,
                                "mean of its scored queries [95% CI]": pl.Utf8})


def pairwise_display(pw, task: str, digits: int = 3):
    """The task's pairs: each difference with its number of common queries, interval and p-values."""

    sub = pw.filter(pl.col("task") == task)
    f = "{:.%df}" % digits
    return pl.DataFrame([{"a": r["a"], "b": r["b"], "n common": str(r["n_common"]),
                          "a - b [95% CI]": f"{f.format(r['mean_diff'])} [{f.format(r['diff_low'])}, {f.format(r['diff_high'])}]",
                          "p": _fmt_p(r["p_value"]), "p (Holm)": _fmt_p(r["p_adjusted"])}
                         for r in sub.iter_rows(named=True)])


def _fmt_p(p: float) -> str:
    if p != p:
        return "-"
    return f"{p:.1e}" if p < 1e-3 else f"{p:.3f}"


def interval_widths(systems: Sequence[System], task: str, n_resamples: int | None = None, seed: int = 0,
                    confidence: dict | None = None):
    """Per system and scope: interval width under ``correct`` and ``authors`` (and, when the
    authors' confidence file for the system is given, the published width)."""

    lbc = leaderboard_frame(systems, [task], "correct", n_resamples, seed)
    lba = leaderboard_frame(systems, [task], "authors", n_resamples, seed)
    a = {(s, sc): hi - lo for s, sc, lo, hi in lba.select("system", "scope", "ci_low", "ci_high").iter_rows()}
    rows = []
    for s, sc, lo, hi, n in lbc.select("system", "scope", "ci_low", "ci_high", "n_queries").iter_rows():
        pub = (confidence or {}).get(s, {}).get(task, {}).get(sc)
        rows.append({"system": s, "scope": sc, "n_queries": n, "width_correct": hi - lo,
                     "width_authors": a[(s, sc)],
                     "width_published": (pub["high"] - pub["low"]) if pub else None,
                     "authors_over_correct": a[(s, sc)] / (hi - lo) if hi > lo else None})
    return pl.DataFrame(rows, schema={"system": pl.Utf8, "scope": pl.Utf8, "n_queries": pl.Int64,
                                      "width_correct": pl.Float64, "width_authors": pl.Float64,
                                      "width_published": pl.Float64, "authors_over_correct": pl.Float64})


def widths_per_scope(widths):
    """Per scope (in order): its queries and the mean over systems of each scheme's width and of
    authors / correct."""
    return (widths.group_by("scope", maintain_order=True)
            .agg(pl.col("n_queries").first(), pl.col("width_correct").mean(), pl.col("width_authors").mean(),
                 pl.col("width_published").mean(), pl.col("authors_over_correct").mean()))


def widths_figure(widths):
    """Bars of the interval width per scope and scheme (mean over systems)."""
    long = widths.unpivot(index=["system", "scope"], on=["width_correct", "width_authors", "width_published"],
                          variable_name="scheme", value_name="width").drop_nulls("width")
    fig, ax = plt.subplots(figsize=(9, 3.8))
    sns.barplot(data={k: long[k].to_list() for k in long.columns}, x="scope", y="width", hue="scheme",
                errorbar=None, ax=ax)
    ax.set_ylabel("95% interval width (mean over systems)")
    ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- text tables
# the leaderboard's tables through the one writer (saber_lib.report.tables): pipes escaped in Markdown;
# small type, two text columns and every LaTeX special character escaped in LaTeX
MARKDOWN_STYLE = {"escape_pipes": True}
LATEX_STYLE = {"small": True, "text_columns": 2, "full_escape": True}


# ----------------------------------------------------------------------------- figures
# the leaderboard's figures through the one writer (saber_lib.report.figures): PNG at 150 dpi, no file-name title,
# saber_lib.leaderboard named as the producer.
FIGURE_STYLE = {"software": "saber_lib.leaderboard", "titled": False, "dpi": 150}


def forest_plot(lb, pw, task: str, scope: str = OVERALL, caption: str = "", alpha: float = 0.05, ax=None):
    """Means with intervals of the ranked systems, best on top, compact letters on the right (systems
    sharing a letter are not significantly different; letters come from the overall pairwise tests)."""

    sub = (lb.filter((pl.col("task") == task) & (pl.col("scope") == scope) & pl.col("rank").is_not_null())
           .sort("mean", descending=False))
    L = letters(lb, pw, task, alpha)
    n = sub.height
    if ax is None:
        fig, ax = plt.subplots(figsize=(7.5, 1.2 + 0.38 * n))
    else:
        fig = ax.figure
    colors = sns.color_palette("colorblind", max(1, len(set(L.values()))))
    groups = {g: colors[i % len(colors)] for i, g in enumerate(sorted(set(L.values())))}
    y = np.arange(n)
    for i, r in enumerate(sub.iter_rows(named=True)):
        c = groups.get(L.get(r["system"], ""), "k")
        # (a percentile interval of few resamples may miss the mean: its whisker on that side is empty)
        xerr = [[max(0.0, r["mean"] - r["ci_low"])], [max(0.0, r["ci_high"] - r["mean"])]]
        ax.errorbar(r["mean"], i, xerr=xerr, fmt="o", color=c, capsize=3, lw=1.5)
    ax.set_yticks(y, sub["system"].to_list())
    ax.set_xlabel(f"nDCG@10 ({task}, {scope}), 95% interval")
    hi = float(sub["ci_high"].max()) if n else 1.0
    lo = float(sub["ci_low"].min()) if n else 0.0
    pad = 0.08 * (hi - lo or 1.0)
    ax.set_xlim(lo - pad, hi + 3 * pad)
    for i, s in enumerate(sub["system"].to_list()):
        ax.text(hi + 1.5 * pad, i, L.get(s, ""), va="center", ha="left", fontsize=10, family="monospace")
    ax.set_ylim(-0.6, n - 0.4)
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(f"SABER-Math leaderboard, {task}, {scope}: same letter = not significantly different "
                 f"(Holm, {alpha})", fontsize=9)
    if caption:
        fig.text(0.01, 0.005, "\n".join(textwrap.wrap(caption, 140)), fontsize=5.5, va="bottom", ha="left")
        fig.subplots_adjust(bottom=0.12 + 0.12 / max(1, n) * 4 + 0.01 * len(textwrap.wrap(caption, 140)))
    return fig


#: systems up to which the p-value heat map writes each cell's value (beyond, colour alone: a cell
#: then is too small to read, and the 2,450 labels of 50 systems cost most of the figure's time)
ANNOTATE_MAX = 20


def pvalue_heatmap(pw, task: str, adjusted: bool = True, order: Sequence[str] | None = None, ax=None,
                   caption: str = "", annotate_max: int = ANNOTATE_MAX):
    """Seaborn heat map of the pairwise (Holm-adjusted by default) p-values of one task,
    systems in ``order`` (default: best first), cells annotated up to ``annotate_max`` systems."""

    sub = pw.filter(pl.col("task") == task)
    col = "p_adjusted" if adjusted else "p_value"
    if order is None:
        order = []
        for a, b in sub.select("a", "b").iter_rows():
            for x in (a, b):
                if x not in order:
                    order.append(x)
    idx = {s: i for i, s in enumerate(order)}
    M = np.full((len(order), len(order)), np.nan)
    for a, b, p in sub.select("a", "b", col).iter_rows():
        if a in idx and b in idx:
            M[idx[a], idx[b]] = M[idx[b], idx[a]] = p
    annotated = len(order) <= annotate_max
    cell = (0.8, 0.6) if annotated else (0.25, 0.25)
    if ax is None:
        fig, ax = plt.subplots(figsize=(3.0 + cell[0] * len(order), 2.5 + cell[1] * len(order)))
    else:
        fig = ax.figure
    annot = (np.array([["" if p != p else ("<1e-4" if p < 1e-4 else f"{p:.3f}" if p >= 1e-3 else f"{p:.0e}")
                        for p in row] for row in M], dtype=object) if annotated else False)
    sns.heatmap(M, ax=ax, cmap="viridis_r", vmin=0, vmax=1, annot=annot, fmt="", annot_kws={"fontsize": 7},
                xticklabels=order, yticklabels=order, square=True, cbar_kws={"label": col})
    ax.set_title(f"Pairwise {'Holm-adjusted ' if adjusted else ''}p-values, {task}"
                 + ("" if annotated else f" ({len(order)} systems: values in pairwise.parquet)"), fontsize=9)
    if caption:
        fig.text(0.01, 0.005, "\n".join(textwrap.wrap(caption, 110)), fontsize=5, va="bottom", ha="left")
    fig.tight_layout(rect=(0, 0.08 if caption else 0, 1, 1))
    return fig


# ----------------------------------------------------------------------------- writer
def write_leaderboard(out_dir, lb, pw, tasks: Sequence[str], prov: Provenance) -> list[Path]:
    """Every output into ``out_dir``: the two Parquet files (provenance in their key-value
    metadata), per task Markdown and LaTeX tables, the forest plot and the p-value heat map, and
    ``manifest.json`` (provenance and the list of files)."""

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cap = prov.caption()
    meta = {"provenance": json.dumps(prov.to_dict()), "caption": cap}
    files = []
    lb.write_parquet(out / "leaderboard.parquet", metadata=meta)
    pw.write_parquet(out / "pairwise.parquet", metadata=meta)
    files += [out / "leaderboard.parquet", out / "pairwise.parquet"]
    for task in tasks:
        t = display_table(lb, pw, task, prov.alpha)
        tcap = f"SABER-Math nDCG@10 leaderboard, task {task}. {cap}"
        (out / f"leaderboard_{task}.md").write_text(to_markdown(t, tcap, **MARKDOWN_STYLE))
        (out / f"leaderboard_{task}.tex").write_text(to_latex(t, tcap, label=f"tab:leaderboard-{task}", **LATEX_STYLE))
        p = pairwise_display(pw, task)
        pcap = f"Pairwise differences of nDCG@10, task {task}. {cap}"
        (out / f"pairwise_{task}.md").write_text(to_markdown(p, pcap, **MARKDOWN_STYLE))
        (out / f"pairwise_{task}.tex").write_text(to_latex(p, pcap, label=f"tab:pairwise-{task}", **LATEX_STYLE))
        files += [out / f"{k}_{task}.{e}" for k in ("leaderboard", "pairwise") for e in ("md", "tex")]
        u = unranked_table(lb, task)
        if u.height:
            ucap = f"Systems not ranked on task {task}: they scored under {prov.min_coverage:.0%} of its queries. {cap}"
            (out / f"unranked_{task}.md").write_text(to_markdown(u, ucap, **MARKDOWN_STYLE))
            (out / f"unranked_{task}.tex").write_text(to_latex(u, ucap, label=f"tab:unranked-{task}", **LATEX_STYLE))
            files += [out / f"unranked_{task}.{e}" for e in ("md", "tex")]
        fig = forest_plot(lb, pw, task, caption=cap, alpha=prov.alpha)
        files += save_figure(fig, out / f"forest_{task}", caption=cap, **FIGURE_STYLE)
        plt.close(fig)
        if pw.height:
            fig = pvalue_heatmap(pw, task, caption=cap)
            files += save_figure(fig, out / f"pvalues_{task}", caption=cap, **FIGURE_STYLE)
            plt.close(fig)
    manifest = {**prov.to_dict(), "caption": cap, "tasks": list(tasks),
                "files": sorted(p.name for p in files) + ["manifest.json"]}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    files.append(out / "manifest.json")
    return files
