"""The evaluate stage's recipes (what ``09_evaluate`` computes besides the kernels of
:mod:`saber_lib.evaluate.tables`): which benchmark it reads, scoring every retriever in every setting, the
captions' common tail, the MTEB correlation and the overall figure.

* :func:`load_benchmark` - this run's built benchmark (select, tournament, corpus, topics) or the
  authors' release (stage ``released``), restricted to the rated queries;
* :func:`score_benchmark` - one retriever's scores of every (query, candidate) in one setting;
* :func:`score_retrievers` - scores of every retriever and setting, with each retriever's backend;
* :func:`caption_tail`, :func:`mteb_correlation`, :func:`overall_figure`;
* :func:`evaluate_retriever` - the in-memory entry point: any object with ``score`` evaluated on a
  finished run's benchmark through the same scoring and tables as the stage.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np
import polars as pl

from . import tables as evaluate
from ..core.config import DOMAINS, SCHEMA, load_profile
from ..core.data import PROJECT_ROOT, load_manifest, require_verified
from ..core.progress import Progress
from ..core.text import setting_texts
from ..retrieval.base import Retriever, score_lists, wrap
from ..retrieval.dense import DenseRetriever
from ..retrieval.registry import get_retriever

RELEASED_JUDGE = "the authors' LLM judge (the released relevance scores)"


@dataclass
class BenchmarkInputs:
    """What the evaluation reads: ``benchmark`` (rated queries only), ``ratings``, ``corpus`` (the
    documents), ``queries`` (query texts when queries are not corpus documents, else None), ``judge``
    (who rated), ``query_domains`` and ``query_levels`` (query -> the source's difficulty label, with the
    source's name: sources grade on different scales), ``tournament_info`` (what the tournament
    recorded; empty on the release), ``n_queries`` (rated queries)."""

    source: str
    benchmark: pl.DataFrame
    ratings: pl.DataFrame
    corpus: pl.DataFrame
    queries: pl.DataFrame | None
    judge: str
    query_domains: dict
    query_levels: dict
    n_queries: int
    tournament_info: dict = field(default_factory=dict)

    @property
    def on_release(self) -> bool:
        return self.source == "released"


def load_benchmark(ctx, source: str) -> BenchmarkInputs:
    """The benchmark ``evaluate.benchmark`` names (``built`` | ``released``), read through ``ctx.input``.

    On the release, ratings are the released relevance scores and queries have their own id space
    (texts from ``released/queries.parquet``); a release stage that imported nothing is an error
    naming the key to set. Only queries with ratings are kept (``tournament_max_queries`` may cap them).
    """
    info: dict = {}
    if source == "released":
        if not (ctx.run_dir / "released" / "benchmark.parquet").exists():
            raise ValueError("evaluate.benchmark is 'released' but the released stage imported nothing: "
                             "set released.benchmark_dir (saber run evaluate --params params/released.yaml "
                             "--set released.benchmark_dir=DIR)")
        bench, ratings, corpus, queries = (pl.read_parquet(ctx.input("released", f"{n}.parquet"))
                                           for n in ("benchmark", "ratings", "documents", "queries"))
        judge = RELEASED_JUDGE
    elif source == "built":
        bench = pl.read_parquet(ctx.input("select", "benchmark.parquet"))
        ratings = pl.read_parquet(ctx.input("tournament", "ratings.parquet"))
        corpus = pl.read_parquet(ctx.input("corpus", "corpus.parquet"))
        queries, info = None, ctx.upstream_info("tournament")
        judge = evaluate.describe_judge(info)
    else:
        raise ValueError(f"evaluate.benchmark: {source!r} is not one of built, released")
    rated = set(ratings["query_id"])
    bench = bench.filter(pl.col("query_id").is_in(rated))
    domains = dict(bench.group_by("query_id").agg(pl.col("query_domains").first()).iter_rows())
    levels = {} if source == "released" else dict(
        corpus.filter(pl.col("doc_id").is_in(rated)).select(
            "doc_id", pl.when(pl.col("source_level").is_not_null()).then(pl.format("{}: {}", "source", "source_level")))
        .iter_rows())
    return BenchmarkInputs(source, bench, ratings, corpus, queries, judge, domains, levels, len(rated), info)


def score_benchmark(retriever: Retriever, benchmark, corpus, setting: str, progress=None, queries=None):
    """Scores of every (query, candidate) of ``benchmark`` for one setting.

    ``benchmark``: polars frame with ``query_id``, ``cand_id``, ``position``; ``corpus``: ``doc_id``,
    ``problem``, ``solution``. ``queries`` (same columns, ``query_id`` for ``doc_id``) holds the query
    texts when queries are not corpus documents (the released benchmark: its own id space).
    Returns ``retriever``, ``setting``, ``query_id``, ``cand_id``, ``score`` (candidates in
    ``position`` order).
    """
    texts = {d: (p, s) for d, p, s in corpus.select("doc_id", "problem", "solution").iter_rows()}
    qtext = texts if queries is None else {
        q: (p, s) for q, p, s in queries.select("query_id", "problem", "solution").iter_rows()}
    missing = sorted((set(benchmark["query_id"]) - set(qtext)) | (set(benchmark["cand_id"]) - set(texts)))
    if missing:
        raise KeyError(f"{len(missing)} benchmark ids not in the corpus, e.g. {missing[:3]}")
    qids, qtexts, cid_lists, ctext_lists = [], [], [], []
    for (q,), g in benchmark.sort("query_id", "position").group_by(["query_id"], maintain_order=True):
        qids.append(q)
        qtexts.append(setting_texts(setting, *qtext[q])[0])
        cids = g["cand_id"].to_list()
        cid_lists.append(cids)
        ctext_lists.append([setting_texts(setting, *texts[c])[1] for c in cids])
    scores = score_lists(retriever, qtexts, ctext_lists, query_ids=qids, candidate_ids=cid_lists)
    rows = []
    for q, cids, s in zip(qids, cid_lists, scores):
        rows += [(retriever.name, setting, q, c, float(v)) for c, v in zip(cids, s)]
    return pl.DataFrame(rows, schema={"retriever": pl.Utf8, "setting": pl.Utf8, "query_id": pl.Utf8,
                                      "cand_id": pl.Utf8, "score": pl.Float64}, orient="row")


def score_retrievers(names: Sequence[str], inputs: BenchmarkInputs, settings: Sequence[str], *, k1: float, b: float,
                     store=None, max_chunks: int | None = None, cache_dir=None, run_min_match: float = 0.0,
                     log: Callable[[str], None] | None = print, timer=None) -> tuple[pl.DataFrame, dict]:
    """Scores of every retriever (``evaluate.retrievers``) in every setting, sorted, and per
    retriever its ``backend``, ``eval_seconds`` and, for an encoder, its model facts. An unknown
    retriever name is an error naming the key. ``timer`` (``evaluate_analyses.LatencyRecorder``)
    records each query's seconds as the retrievers score."""
    parts, info = [], {}
    counter = Progress("retriever", len(names))
    for name in names:
        try:
            r = get_retriever(name, k1=k1, b=b, store=store, max_chunks=max_chunks, cache_dir=cache_dir,
                              run_min_match=run_min_match)
        except KeyError as e:
            raise ValueError(f"evaluate.retrievers: {e}") from None
        start = time.perf_counter()
        for setting in settings:
            scorer = r if timer is None else timer.wrap(r, setting)
            parts.append(score_benchmark(scorer, inputs.benchmark, inputs.corpus, setting, queries=inputs.queries))
        secs = time.perf_counter() - start
        info[name] = {"backend": r.backend, "eval_seconds": round(secs, 2)}
        if isinstance(r, DenseRetriever):
            info[name].update({k: v for k, v in r.encoder.info().items()
                               if k in ("model_id", "dim", "size_mb", "max_tokens", "max_chunks", "long_words_split")})
        if log:
            log(f"{name:>22}: {secs:7.1f} s  {r.backend}")
        counter.update()
    counter.close()
    return pl.concat(parts).sort("retriever", "setting", "query_id", "cand_id"), info


def caption_tail(inputs: BenchmarkInputs, model_info: Mapping[str, dict]) -> str:
    """What every table of the stage ends with: queries, judge, and each retriever's model or backend."""
    return (f"{inputs.n_queries} queries, ratings from the tournament judged by {inputs.judge}; "
            f"encoders: " + ", ".join(f"{k}={v.get('model_id', v['backend'])}" + _split_note(v)
                                      for k, v in model_info.items()))


def _split_note(info: Mapping) -> str:
    """Said beside an encoder that split words too long for its tokenizer (``long_words_split``)."""
    n = info.get("long_words_split") or 0
    return f" ({n} texts with words over 100 characters split for its tokenizer)" if n else ""


def overall_means(summary) -> dict[str, float]:
    """Retriever -> its overall mean nDCG in the main setting (statement-full)."""
    return dict(summary.filter((pl.col("setting") == "statement-full") & (pl.col("group") == "Overall"))
                .select("retriever", "mean").iter_rows())


def mteb_correlation(summary, mteb_scores: Mapping[str, float] | None) -> tuple[dict | None, str]:
    """Pearson and Spearman between the overall means and ``evaluate.mteb_scores`` over the models
    both cover (None when fewer than 3), and a line saying so."""
    overall = overall_means(summary)
    common = [m for m in overall if m in (mteb_scores or {})]
    if len(common) < 3:
        return None, (f"MTEB correlation not available: evaluate.mteb_scores covers {len(common)} of the evaluated "
                      f"models (3 needed)")
    corr = evaluate.correlations([overall[m] for m in common], [mteb_scores[m] for m in common])
    return corr, f"{len(common)} models: Pearson {corr['pearson']:.2f}, Spearman {corr['spearman']:.2f}"


def overall_figure(summary, k: int, level: float):
    """Bars of the overall nDCG@k (statement-full) with their bootstrap intervals, best at the top."""
    import matplotlib.pyplot as plt  # pyplot only once saber_lib.plots has chosen the backend

    df = summary.filter((pl.col("setting") == "statement-full") & (pl.col("group") == "Overall")).sort("mean")
    fig, ax = plt.subplots(figsize=(6, 0.35 * df.height + 1.2))
    m = df["mean"].to_numpy()
    ax.barh(df["retriever"].to_list(), m, xerr=np.vstack([m - df["lo"].to_numpy(), df["hi"].to_numpy() - m]),
            color="#4c72b0", capsize=3)
    ax.set_xlabel(f"nDCG@{k} (statement-full), {int(level * 100)}% CI")
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- in memory
# the evaluate section's keys evaluate_retriever takes from the run (the stage's manifest, else paper.yaml)
RUN_KEYS = ("benchmark", "settings", "ndcg_k", "tie_policy", "n_bootstrap", "ci_level", "seed")


class FinishedRun:
    """Read-only access to a finished run's artifacts, with the reading interface of a stage
    context (``input``, ``upstream_info``, ``run_dir``) that :func:`load_benchmark` uses; a stage
    without a manifest is an error naming the command that makes it."""

    def __init__(self, run_dir):
        self.run_dir = Path(run_dir)
        if not self.run_dir.is_dir():
            raise FileNotFoundError(f"{self.run_dir}: no run directory (saber run evaluate --params ... --run-dir DIR)")
        self._verified: dict[str, dict] = {}

    def manifest(self, stage: str) -> dict:
        """The stage's manifest, once every file it recorded still hashes as recorded (an edited
        artifact is :class:`saber_lib.core.data.ArtifactModified`, as for ``saber export``)."""
        if stage not in self._verified:
            path = self.run_dir / stage / "manifest.json"
            if not path.exists():
                raise FileNotFoundError(f"{path} is missing: stage {stage!r} has not finished "
                                        f"(saber run {stage} --run-dir {self.run_dir})")
            self._verified[stage] = require_verified(self.run_dir, stage)
        return self._verified[stage]

    def input(self, stage: str, name: str) -> Path:
        self.manifest(stage)
        path = self.run_dir / stage / name
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing: run stage {stage!r} again (saber run {stage} "
                                    f"--run-dir {self.run_dir})")
        return path

    def upstream_info(self, stage: str) -> dict:
        return self.manifest(stage).get("info", {})

    def evaluate_parameters(self) -> dict:
        """The run's evaluate parameters (:data:`RUN_KEYS`): its evaluate manifest's, else paper.yaml's
        (a damaged manifest, or one without them or with a value out of the profile's range, is a
        ``ValueError`` naming it)."""
        path = self.run_dir / "evaluate" / "manifest.json"
        man = load_manifest(path)
        if man is None:
            paper = load_profile(PROJECT_ROOT / "params" / "paper.yaml")
            return {**{k: paper.values["evaluate"][k] for k in RUN_KEYS if k != "seed"}, "seed": paper.values["run"]["seed"]}
        params = man.get("parameters")
        missing = [k for k in RUN_KEYS if not isinstance(params, dict) or k not in params]
        if missing:
            raise ValueError(f"{path}: the stage's parameters lack {', '.join(missing)}: run the evaluate stage again")
        return check_run_keys({k: params[k] for k in RUN_KEYS}, f"{path}: parameters.")


def check_run_keys(params: dict, where: str) -> dict:
    """``params`` (keys of :data:`RUN_KEYS`) when each is of the type and in the range the profile's
    schema gives it (``seed``: ``run.seed``); else a ``ValueError`` ``<where><key>: <what is wrong>``."""
    for key, value in params.items():
        err = SCHEMA["run" if key == "seed" else "evaluate"][key].check(value)
        if err:
            raise ValueError(f"{where}{key}: {err}")
    return params


def evaluate_retriever(retriever, *, run_dir, settings: Sequence[str] | None = None, name: str | None = None,
                       **overrides) -> pl.DataFrame:
    """nDCG@k of ``retriever`` (any object with ``score(query, documents)``, optionally
    ``score_many``) on the benchmark of the finished run ``run_dir``, through the evaluate stage's own
    code: :func:`load_benchmark`, :func:`score_benchmark`, ``tables.ndcg_table`` and
    ``tables.summarize``. Returns the summary table: one row per (setting, group) with ``group``
    ``Overall`` or a domain, ``mean``, ``lo``, ``hi`` (bootstrap interval over queries) and ``n``.

    The benchmark (``built`` or ``released``), the settings, k, the tie policy, the bootstrap's
    resamples, level and seed are the run's evaluate parameters (or paper.yaml's when the run has no
    evaluate stage); ``settings`` and ``overrides`` (keys of :data:`RUN_KEYS`) replace them, so the
    same values as the stage give the stage's own numbers."""
    run = FinishedRun(run_dir)
    params = run.evaluate_parameters()
    unknown = sorted(set(overrides) - set(RUN_KEYS))
    if unknown:
        raise TypeError(f"evaluate_retriever: unknown keyword(s) {unknown}; use {', '.join(RUN_KEYS)}")
    params.update(overrides)
    if settings is not None:   # a string is refused, not read letter by letter
        params["settings"] = settings if isinstance(settings, str) else list(settings)
    check_run_keys(params, "evaluate_retriever: ")
    scorer = wrap(retriever, name or getattr(retriever, "name", None) or type(retriever).__name__)
    inputs = load_benchmark(run, params["benchmark"])
    scores = pl.concat([score_benchmark(scorer, inputs.benchmark, inputs.corpus, s, queries=inputs.queries)
                        for s in params["settings"]])
    ndcg = evaluate.ndcg_table(scores, inputs.ratings, k=params["ndcg_k"], tie_policy=params["tie_policy"])
    return evaluate.summarize(ndcg.sort("retriever", "setting", "query_id"), inputs.query_domains, DOMAINS,
                              n_bootstrap=params["n_bootstrap"], level=params["ci_level"], seed=params["seed"])
