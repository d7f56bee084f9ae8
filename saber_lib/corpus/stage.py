"""The corpus stage's recipes (what ``00_corpus`` computes around :func:`build_corpus`): the
dedup backend line every caption names, the build on the profile's executor, the facts for the
manifest, and the figures of the kept records.
"""
from __future__ import annotations

import time
from typing import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import polars as pl

from ..report import plots
from ..core.data import package_version
from ..core.parallel import make_executor
from .build import DEDUP_BACKEND, CorpusResult, build_corpus

# The build's own parameters, named as the profile's ``corpus`` keys.
BUILD_KEYS = ("sources", "max_records_per_source", "shingle_size", "minhash_bands", "minhash_rows", "minhash_seed",
              "near_dup_threshold", "near_dup_number_check", "allow_empty_sources")
# Packages whose versions the manifest keeps (those installed).
PACKAGES = ("datasketch", "champ-dataset", "polars")


def build_params(params: Mapping) -> dict:
    """The ``corpus`` keys of ``params`` (the notebook's parameters by name)."""
    return {key: params[key] for key in BUILD_KEYS}


def dedup_backend(params: Mapping) -> str:
    """The dedup backend with its MinHash shape, shingles, threshold and number check, for captions."""
    check = ", number check" if params["near_dup_number_check"] else ""
    return (f"{DEDUP_BACKEND} ({params['minhash_bands']}x{params['minhash_rows']}, word {params['shingle_size']}-grams, "
            f"J>={params['near_dup_threshold']}{check})")


def run_build(data_dir, params: Mapping, executor: str = "local", threads: int = 0, dask_scheduler=None,
              dask_workers: int = 0) -> tuple[CorpusResult, float]:
    """Build the corpus (MinHash signatures on the Dask cluster when ``executor`` is ``dask``);
    returns the result and the wall time in seconds."""
    start = time.perf_counter()
    if executor == "dask":
        with make_executor(executor, threads, dask_scheduler, dask_workers) as pool:
            result = build_corpus(data_dir, build_params(params), executor=pool)
    else:
        result = build_corpus(data_dir, build_params(params))
    return result, time.perf_counter() - start


def manifest_record(result: CorpusResult, backend: str, wall: float) -> dict:
    """What the manifest keeps: backend, installed package versions, counts and timings (seconds, 3 decimals)."""
    versions = {pkg: package_version(pkg) for pkg in PACKAGES}
    return {"backend": backend, "packages": {pkg: v for pkg, v in versions.items() if v is not None},
            "counts": result.report["total"],
            "timings_s": {**{k: round(v, 3) for k, v in result.timings.items()}, "build_corpus_s": round(wall, 3)}}


def present_sources(lengths: pl.DataFrame, sources: Sequence[str]) -> list[str]:
    """The profile's sources that kept at least one record, in profile order."""
    have = set(lengths["source"].to_list())
    return [s for s in sources if s in have]


def near_duplicate_figure(dedup_log: pl.DataFrame, threshold: float):
    """Histogram of the estimated Jaccard of every removed cross-source near duplicate, the threshold marked."""
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    near = dedup_log.filter(pl.col("rule") == "near-cross-source")["similarity"].to_numpy()
    ax.hist(near, bins=np.linspace(0, 1, 41), color="#4C72B0")
    ax.axvline(threshold, color="#C44E52", ls="--", label=f"threshold {threshold}")
    ax.set_xlabel("estimated Jaccard of removed near duplicate to kept record")
    ax.set_ylabel("records")
    ax.legend()
    return fig


def lengths_figure(lengths: pl.DataFrame, present: Sequence[str]):
    """Box plots (log scale) of problem and solution lengths per source, sources in ``present`` order."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 0.45 * len(present) + 1.5), sharey=True)
    for ax, col, title in zip(axes, ("problem_chars", "solution_chars"), ("problem", "solution")):
        data = [np.maximum(lengths.filter(pl.col("source") == s)[col].to_numpy(), 1) for s in present]
        ax.boxplot(data, orientation="horizontal", showfliers=False)
        ax.set_yticks(range(1, len(present) + 1), present)
        ax.set_xscale("log")
        ax.set_xlabel(f"{title} length (characters, log scale)")
    axes[0].invert_yaxis()
    return fig


def source_domain_shares(dom: pl.DataFrame, domains: Sequence[str]) -> tuple[list[str], dict[str, np.ndarray]]:
    """Bar labels (``source (kept records)``) and each label's share per domain and ``unmapped``
    (0 for a source without records) of a :func:`views.domain_counts` table."""
    labels = list(domains) + ["unmapped"]
    totals = dom.select(labels).sum_horizontal().to_numpy()
    names = [f"{s} ({n})" for s, n in zip(dom["source"].to_list(), totals)]
    return names, {d: dom[d].to_numpy() / np.maximum(totals, 1) for d in labels}


def domain_share_figure(dom: pl.DataFrame, domains: Sequence[str]):
    """Stacked bars: the share of each source's kept records per domain (:func:`source_domain_shares`)."""
    names, shares = source_domain_shares(dom, domains)
    fig, ax = plt.subplots(figsize=(7, 0.45 * dom.height + 1.5))
    left = np.zeros(dom.height)
    colors = {**plots.DOMAIN_COLORS, "unmapped": "#BBBBBB"}
    for d, share in shares.items():
        ax.barh(names, share, left=left, color=colors[d], label=d)
        left += share
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of the source's kept records")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=3, fontsize=8)
    return fig


def subjects_figure(subj: pl.DataFrame):
    """Bars of a :func:`views.top_subjects` table, most frequent on top."""
    fig, ax = plt.subplots(figsize=(7, 0.3 * subj.height + 1.2))
    ax.barh([f"{s}: {t}" for s, t in subj.select("source", "subject").iter_rows()], subj["n"].to_numpy(),
            color="#4C72B0")
    ax.invert_yaxis()
    ax.set_xlabel("kept records")
    ax.set_title("Most frequent source subject labels")
    return fig
