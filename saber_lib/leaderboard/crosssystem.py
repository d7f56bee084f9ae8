"""The leaderboard's cross-system readings of the published results (and of a run's retrievers):
MTEB against SABER-Math (:mod:`.mteb`) and the rephrased-copy rank against quality
(:mod:`.rephrased`), written beside the leaderboard by ``saber leaderboard``.

Files (in ``OUT``), every setting, statement-full first:

* ``mteb_matches.csv`` (``system``, ``mteb_model``: empty when unmatched) and ``mteb_matches.md``
  (with the kind of system and why a system is unmatched);
* ``mteb_correlation.parquet`` / ``.md``: ``task``, ``scope``, ``mteb_column``, ``n_systems``,
  ``spearman``, ``kendall``, ``pearson``, each with ``_low`` / ``_high``, ``n_resamples``, ``systems``;
* ``mteb_scatter_<task>.png`` / ``.pdf``;
* ``rephrased_summaries.parquet`` (the published summaries as read), ``rephrased_correlation.parquet``
  / ``.md`` (``source`` = ``published`` or a run directory's name) and ``rephrased_vs_ndcg_<source>``
  figures.

A system's quality in a setting is its overall mean nDCG@10: the ``mean`` of its published
confidence file (the authors' bootstrap mean, within about 1e-4 of the plain mean), or, without one,
the plain mean over the scored queries of its evaluation file or run.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
import polars as pl

from ..core import data
from ..report.figures import save_figure
from ..report.tables import to_markdown
from . import mteb, rephrased
from .published import TASKS, LayoutError, PublishedDir, read_run
from .report import FIGURE_STYLE, MARKDOWN_STYLE
from .scopes import OVERALL

ORDERED_TASKS = ("statement-full",) + tuple(t for t in TASKS if t != "statement-full")


def _plain_mean(v) -> float | None:
    v = np.asarray(v, dtype=np.float64)
    v = v[~np.isnan(v)]
    return float(v.mean()) if v.size else None


def gather(pub: PublishedDir, run_dirs: Sequence) -> tuple[dict, list[tuple[str, str, str]], dict]:
    """``quality[name][task]``, the systems ``(name, source, table key)`` in order (published first,
    sorted; then each run's retrievers, named ``<run dir>/<retriever>`` where a published system has
    the name) and per run directory name its retrievers' ``quality`` keyed by retriever."""
    quality: dict[str, dict[str, float]] = {}
    for s in pub.systems:
        quality[s.name] = {t: m for t, v in s.scores.items() if (m := _plain_mean(v)) is not None}
    for name, tasks in pub.confidence.items():
        quality[name] = {**quality.get(name, {}), **{t: sc[OVERALL]["mean"] for t, sc in tasks.items() if OVERALL in sc}}
    systems = [(n, "published", n) for n in sorted(quality)]
    runs = {}
    for rd in run_dirs:
        own = {s.name: {t: m for t, v in s.scores.items() if (m := _plain_mean(v)) is not None} for s in read_run(rd)}
        runs[Path(rd).name] = own
        for r, q in own.items():
            name = r if r not in quality else f"{Path(rd).name}/{r}"
            quality[name] = q
            systems.append((name, "workbench", r))
    return quality, systems, runs


def write_mteb(out: Path, mteb_file, pub: PublishedDir, run_dirs: Sequence, n_resamples: int, seed: int,
               caption_tail: str) -> tuple[list[Path], dict]:
    """The MTEB files of the module docstring; returns them and the facts for the manifest."""
    board = mteb.read_mteb(mteb_file)
    table = mteb.read_systems_table()
    quality, systems, _ = gather(pub, run_dirs)
    match = mteb.matches(systems, board, table)
    corr = mteb.mteb_correlation_frame(match, board, quality, ORDERED_TASKS, n_resamples, seed)
    files = []
    match.select("system", pl.col("mteb_model").fill_null("")).write_csv(out / "mteb_matches.csv")
    n_matched = int((match["status"] == "matched").sum())
    cap = (f"Published systems (and this run's retrievers) matched to rows of the MTEB leaderboard "
           f"{Path(mteb_file).name} by the committed systems table (saber_lib/leaderboard/systems.csv); "
           f"{n_matched} of {match.height} matched, the others listed with the reason. {caption_tail}")
    (out / "mteb_matches.md").write_text(to_markdown(match, cap, **MARKDOWN_STYLE))
    corr.write_parquet(out / "mteb_correlation.parquet", metadata={"caption": cap})
    ccap = (f"Correlation across systems of the MTEB score (column) with SABER-Math overall nDCG@10 (setting); "
            f"scope all: every matched system; embedding: embedding models; recent: embedding models released in "
            f"2025 or later; 95% percentile intervals over {n_resamples} resamples of the systems, seed {seed}. "
            f"{caption_tail}")
    show = corr.drop("systems", "n_resamples")
    (out / "mteb_correlation.md").write_text(to_markdown(show, ccap, float_fmt="{:.2f}", **MARKDOWN_STYLE))
    files += [out / "mteb_matches.csv", out / "mteb_matches.md", out / "mteb_correlation.parquet",
              out / "mteb_correlation.md"]
    for task in ORDERED_TASKS:
        fig = mteb.mteb_scatter_figure(match, board, quality, task, corr)
        files += save_figure(fig, out / f"mteb_scatter_{task}", caption=ccap, **FIGURE_STYLE)
        plt.close(fig)
    head = corr.filter((pl.col("task") == "statement-full") & (pl.col("mteb_column") == "Retrieval"))
    facts = {"mteb_file": str(Path(mteb_file).resolve()), "mteb_matched": n_matched,
             "mteb_unmatched": match.filter(pl.col("status") != "matched")["system"].to_list(),
             "mteb_statement_full_retrieval": {s: {"n": n, "spearman": _num(sp), "pearson": _num(p)} for s, n, sp, p in
                                               head.select("scope", "n_systems", "spearman", "pearson").iter_rows()}}
    return files, facts


def write_rephrased(out: Path, dedup_file, pub: PublishedDir, run_dirs: Sequence, n_resamples: int, seed: int,
                    caption_tail: str) -> tuple[list[Path], dict]:
    """The rephrased-rank files of the module docstring (published, and every run with a verified
    robustness stage that wrote ``rephrased_rank.parquet``); returns them and the manifest facts."""
    quality, _, runs = gather(pub, run_dirs)
    table = mteb.read_systems_table()
    summaries, rows, sources = [], [], []
    if dedup_file is not None:
        pubsum = rephrased.read_dedup_summaries(dedup_file)
        summaries.append(("published", pubsum, quality, {n for (s, n), t in table.items()
                                                           if s == "published" and t["category"] == "lexical"}))
    for rd in run_dirs:
        f = Path(rd) / "robustness" / "rephrased_rank.parquet"
        if not f.is_file():
            continue
        try:
            data.require_verified(Path(rd), "robustness")
        except (data.ArtifactModified, data.StageUnfinished, OSError, ValueError) as e:
            raise LayoutError(str(e)) from None
        summaries.append((Path(rd).name, rephrased.run_summary(f), runs[Path(rd).name],
                          {n for (s, n), t in table.items() if s == "workbench" and t["category"] == "lexical"}))
    for source, summ, q, _lex in summaries:
        pools = [p for p in ("one copy", "all copies", "corpus") if p in set(summ["pool"].to_list())]
        rows += rephrased.correlation_rows(source, summ, q, ORDERED_TASKS, pools, n_resamples, seed)
        sources.append(source)
    if not summaries:
        return [], {}
    corr = rephrased.rephrased_correlation_frame(rows)
    cap = (f"Spearman's rho across systems between a reading of the rephrased copy's rank (mean_rank, median_rank: "
           f"lower is better; top1: share of queries whose copy ranks first) and overall nDCG@10 per setting; pools: "
           f"one copy among the query's candidates, all queries' copies inserted at once (and the whole corpus for a "
           f"run); 95% percentile intervals over {n_resamples} resamples of the systems, seed {seed}. "
           f"Sources: {', '.join(sources)}. {caption_tail}")
    files = []
    corr.write_parquet(out / "rephrased_correlation.parquet", metadata={"caption": cap})
    (out / "rephrased_correlation.md").write_text(
        to_markdown(corr.drop("systems", "n_resamples"), cap, float_fmt="{:.2f}", **MARKDOWN_STYLE))
    files += [out / "rephrased_correlation.parquet", out / "rephrased_correlation.md"]
    if dedup_file is not None:
        summaries[0][1].write_parquet(out / "rephrased_summaries.parquet",
                                      metadata={"caption": f"Read from {Path(dedup_file).name}."})
        files.append(out / "rephrased_summaries.parquet")
    for source, summ, q, lex in summaries:
        fig = rephrased.rephrased_scatter_figure(summ, q, ORDERED_TASKS, corr, lex, source)
        stem = "rephrased_vs_ndcg" if source == "published" else f"rephrased_vs_ndcg_{_safe(source)}"
        files += save_figure(fig, out / stem, caption=cap, **FIGURE_STYLE)
        plt.close(fig)
    head = corr.filter((pl.col("reading") == "mean_rank") & (pl.col("task") == "statement-full"))
    facts = {"rephrased_sources": sources,
             "rephrased_statement_full_mean_rank": [{"source": s, "pool": p, "n": n, "spearman": _num(r)} for s, p, n, r
                                                    in head.select("source", "pool", "n_systems", "spearman").iter_rows()]}
    return files, facts


def _num(v):
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
