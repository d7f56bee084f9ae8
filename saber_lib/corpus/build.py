"""The corpus stage: load every source, quarantine unusable records, remove duplicates, report.

Per source the counts reconcile exactly:

    raw = kept + removed_as_duplicate + quarantined
    removed_as_duplicate = exact_within_source + near_cross_source

:func:`build_corpus` is pure (reads the data directory and the installed CHAMP package, writes
nothing) and deterministic: the same data and parameters give the same tables in the same order
(sources in priority order, records in file order). :func:`write_outputs` writes the artifacts.
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from ..core.progress import track
from ..core import plugins
from ..core.data import resolve_data_dir
from ..core.data import write_json
from . import dedup
from .loaders import LOADERS, load_source
from .schema import CORPUS_SCHEMA, DEDUP_LOG_SCHEMA, QUARANTINE_SCHEMA, RULE_EXACT, RULE_NEAR

PARAM_KEYS = ("sources", "max_records_per_source", "shingle_size", "minhash_bands", "minhash_rows",
              "minhash_seed", "near_dup_threshold", "near_dup_number_check")
# optional keys and their value when absent
OPTIONAL_KEYS = {"allow_empty_sources": False}

DEDUP_BACKEND = "datasketch MinHash + MinHashLSH"


@dataclass
class CorpusResult:
    corpus: pl.DataFrame
    quarantine: pl.DataFrame
    dedup_log: pl.DataFrame
    report: dict[str, Any]
    timings: dict[str, float] = field(default_factory=dict)  # seconds; never written to artifacts


def _params(params: dict) -> dict:
    missing = [k for k in PARAM_KEYS if k not in params]
    if missing:
        raise KeyError(f"build_corpus: missing parameter(s) {', '.join('corpus.' + k for k in missing)}")
    p = {k: params[k] for k in PARAM_KEYS}
    p.update({k: params.get(k, v) for k, v in OPTIONAL_KEYS.items()})
    if any(s not in LOADERS for s in p["sources"]):
        plugins.load_from_environment()   # a stage's kernel: the run's plugins
    bad = [s for s in p["sources"] if s not in LOADERS]
    if bad:
        raise ValueError(f"corpus.sources: unknown source(s) {bad} (known: {', '.join(LOADERS)})")
    if len(set(p["sources"])) != len(p["sources"]):
        raise ValueError("corpus.sources: a source is listed twice")
    return p


def build_corpus(data_dir, params: dict, executor=None) -> CorpusResult:
    """Load, validate and deduplicate the sources listed in ``params["sources"]`` (priority order).

    ``params`` holds the ``corpus`` section: ``sources``, ``max_records_per_source`` (0 = all),
    ``shingle_size``, ``minhash_bands``, ``minhash_rows``, ``minhash_seed``, ``near_dup_threshold``,
    ``near_dup_number_check`` (see :mod:`saber_lib.corpus.dedup` for the rules), and optionally
    ``allow_empty_sources`` (default false: an empty source file raises ``SourceFileError``;
    true: it counts 0 records and the report lists it under ``notes.empty_files`` of its source).
    ``executor`` (:mod:`saber_lib.core.parallel`, optional): computes the MinHash signatures in parallel.
    """
    p = _params(params)
    data_dir = resolve_data_dir(data_dir)
    timings: dict[str, float] = {}

    t0 = time.perf_counter()
    loads = [load_source(s, data_dir, p["max_records_per_source"], allow_empty=p["allow_empty_sources"])
             for s in track(p["sources"], "source")]
    records = [r for ld in loads for r in ld.records]
    quarantine = [q for ld in loads for q in ld.quarantine]
    timings["load_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    ex = dedup.exact_within_source(records)
    records = [r for r, k in zip(records, ex.keep) if k]
    timings["exact_dedup_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    near = dedup.near_cross_source(records, p["sources"], p["shingle_size"], p["minhash_bands"],
                                   p["minhash_rows"], p["minhash_seed"], p["near_dup_threshold"],
                                   p["near_dup_number_check"], executor=executor)
    records = [r for r, k in zip(records, near.keep) if k]
    timings["near_dedup_s"] = time.perf_counter() - t0

    log = ex.log + near.log
    corpus = pl.DataFrame(records, schema=CORPUS_SCHEMA, orient="row") if records else \
        pl.DataFrame(schema=CORPUS_SCHEMA)
    qdf = pl.DataFrame(quarantine, schema=QUARANTINE_SCHEMA, orient="row") if quarantine else \
        pl.DataFrame(schema=QUARANTINE_SCHEMA)
    ldf = pl.DataFrame(log, schema=DEDUP_LOG_SCHEMA, orient="row") if log else \
        pl.DataFrame(schema=DEDUP_LOG_SCHEMA)
    report = make_report(p, loads, corpus, qdf, ldf)
    report["lsh_candidate_pairs"] = near.candidate_pairs
    report["lsh_candidates_below_threshold"] = near.below_threshold
    report["lsh_candidates_numbers_differ"] = near.numbers_differ
    return CorpusResult(corpus, qdf, ldf, report, timings)


def make_report(p: dict, loads, corpus: pl.DataFrame, quarantine: pl.DataFrame,
                log: pl.DataFrame) -> dict:
    """Counts per source at each step, duplicates per (removed, kept) source pair, reasons."""
    kept = Counter(corpus["source"].to_list())
    quar = Counter(quarantine["source"].to_list())
    exact = Counter(log.filter(pl.col("rule") == RULE_EXACT)["removed_source"].to_list())
    near = Counter(log.filter(pl.col("rule") == RULE_NEAR)["removed_source"].to_list())
    per_source = {}
    for ld in loads:
        s = ld.source
        row = {"raw": ld.raw, "quarantined": quar[s], "loaded": ld.raw - quar[s],
               "exact_duplicates": exact[s], "near_duplicates": near[s],
               "removed_as_duplicate": exact[s] + near[s], "kept": kept[s]}
        if row["raw"] != row["kept"] + row["removed_as_duplicate"] + row["quarantined"]:
            raise RuntimeError(f"corpus counts do not reconcile for source {s!r}: {row}")
        if ld.notes:
            row["notes"] = dict(ld.notes)
        per_source[s] = row
    total = {k: sum(r[k] for r in per_source.values())
             for k in ("raw", "quarantined", "loaded", "exact_duplicates", "near_duplicates",
                       "removed_as_duplicate", "kept")}
    pairs = Counter(zip(log["rule"].to_list(), log["removed_source"].to_list(), log["kept_source"].to_list()))
    dup_pairs = [{"rule": r, "removed_source": a, "kept_source": b, "n": n}
                 for (r, a, b), n in sorted(pairs.items(), key=lambda kv: (kv[0][0], -kv[1], kv[0][1:]))]
    b, r = p["minhash_bands"], p["minhash_rows"]
    return {
        "sources": list(p["sources"]),
        "params": dict(p),
        "dedup_backend": DEDUP_BACKEND,
        "num_perm": b * r,
        "lsh_threshold_approx": round((1.0 / b) ** (1.0 / r), 4),
        "per_source": per_source,
        "total": total,
        "duplicates_by_source_pair": dup_pairs,
        "quarantine_reasons": dict(sorted(Counter(quarantine["reason"].to_list()).items())),
    }


def write_outputs(result: CorpusResult, out_dir) -> dict[str, Path]:
    """Write corpus.parquet, quarantine.parquet, dedup_log.parquet and report.json to ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {name: out / name for name in ("corpus.parquet", "quarantine.parquet",
                                            "dedup_log.parquet", "report.json")}
    result.corpus.write_parquet(paths["corpus.parquet"])
    result.quarantine.write_parquet(paths["quarantine.parquet"])
    result.dedup_log.write_parquet(paths["dedup_log.parquet"])
    write_json(paths["report.json"], result.report)
    return paths
