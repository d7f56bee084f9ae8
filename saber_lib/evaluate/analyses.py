"""The evaluate stage's further analyses (what ``09_evaluate`` adds to the main tables): rescaling
robustness, per-query latency with the latency-quality figure, and the instruction arms.

* :func:`rescaling_table` - the systems' mean nDCG@k (main setting) under other relevance scales and
  gains (``evaluate.rescaling_schemes``, kernel :mod:`saber_lib.metrics.rescaling`) against the
  benchmark's own, one row per scheme; :func:`rating_scale` is the benchmark's own scale.
* :class:`LatencyRecorder` - per-query seconds of every retriever while it scores
  (``evaluate_stage.score_retrievers(..., timer=recorder)``), :func:`latency_summary` and
  :func:`latency_quality_figure`. What a query's time covers:

  - a lexical retriever (its own per-query ``score``): the whole call - tokenizing, fitting its
    statistics or index over the query's own candidates (the reranking protocol builds nothing
    before the query arrives) and scoring; the call is the one the evaluation makes, so timing it
    costs nothing;
  - an encoder: embedding the query text (one query per call, the store bypassed: a cache hit would
    time a lookup) and its cosine with the candidates' vectors. The candidates' vectors are the
    index (computed once per text and cached) and are left out. This is one extra query embedding
    per (query, timed setting), about 1/150 of the stage's embedding work. The timed settings are
    ``evaluate.latency_settings`` (the authors time statement-full only);
  - a TREC run file, or a retriever that scores all queries at once: not timed (listed in the log).

  Timings are run-to-run noise: ``latency.parquet`` is one of ``core.data.TIMING_FILES``, kept out of the
  stage's output hash and recorded outputs, so a rerun with the same inputs is still "unchanged".
* :func:`instruction_arms` - the encoders re-scored with each instruction arm
  (``evaluate.instruction_arms``, texts in :mod:`saber_lib.embed.instructions`); mean nDCG per arm,
  its difference to ``p0`` and the paired sign-flip p-value (``evaluation.resample``). Only the
  queries are embedded again: candidates' vectors come from the store.
* query-set stability of the retrievers' order (:mod:`.stability`): ``stability.parquet``,
  ``stability_swaps.parquet``, ``stability_needed.parquet``, its table and figures.
"""
from __future__ import annotations

import json
import time
from typing import Sequence

import numpy as np
import polars as pl

from .. import embed
from . import arm_summaries, stability
from . import tables as evaluate
from ..embed.instructions import instructed
from ..core.scales import duplicate_scheme, parse_scheme
from ..metrics.rescaling import COLUMNS, compare_systems, scheme_ratings
from ..metrics.resample import sign_flip_pvalues
from ..core.seeds import rng_for
from ..released.stage import MAX_SCORE
from ..retrieval.base import Retriever
from ..retrieval.dense import DenseRetriever
from ..retrieval.registry import get_retriever, retriever_class, retriever_classes
from .stage import score_benchmark

MAIN_SETTING = "statement-full"


# ----------------------------------------------------------------------------- rescaling
def rating_scale(ctx, on_release: bool) -> float:
    """The top of the benchmark's rating scale: the release's (5) or the tournament's
    ``rating_top``, read from the tournament's manifest."""
    if on_release:
        return MAX_SCORE
    path = ctx.input("tournament", "manifest.json")
    try:
        return float(json.loads(path.read_text())["parameters"]["rating_top"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"{path}: no parameters.rating_top recorded; rerun the tournament stage") from None


def _system_means(ndcg: pl.DataFrame) -> dict[str, float]:
    return dict(ndcg.group_by("retriever").agg(pl.col("ndcg").mean()).iter_rows())


def rescaling_table(ndcg: pl.DataFrame, scores: pl.DataFrame, ratings: pl.DataFrame, schemes: Sequence[str], *,
                    top: float, k: int, tie_policy: str = "position", setting: str = MAIN_SETTING) -> pl.DataFrame:
    """One row per scheme (:data:`~saber_lib.metrics.rescaling.COLUMNS`): every retriever's mean
    nDCG@k in ``setting`` with the ratings rescaled by the scheme, compared with its mean in the
    stage's ``ndcg`` table (the benchmark's own scale and gain)."""
    ref_rows = ndcg.filter(pl.col("setting") == setting)
    sub = scores.filter(pl.col("setting") == setting)
    reference = _system_means(ref_rows)
    rel, qids = ratings["rating"].to_numpy(), ratings["query_id"].to_numpy()
    rows = []
    for text in schemes:   # every scheme valid and listed once before any is replayed
        try:
            parse_scheme(text)
        except ValueError as e:
            raise ValueError(f"evaluate.rescaling_schemes: {e}") from None
    if duplicate_scheme(schemes):
        raise ValueError(f"evaluate.rescaling_schemes: {duplicate_scheme(schemes)}")
    for text in schemes:
        sch = parse_scheme(text)
        r2 = ratings.with_columns(pl.Series("rating", scheme_ratings(rel, qids, sch, top)))
        other = _system_means(evaluate.ndcg_table(sub, r2, k=k, tie_policy=tie_policy, gain=sch.gain))
        rows.append({"scheme": sch.label, **compare_systems(reference, other)})
    schema = {"scheme": pl.Utf8, "pearson": pl.Float64, "spearman": pl.Float64, "kendall": pl.Float64,
              "swapped_pairs": pl.Int64, "system_pairs": pl.Int64, "max_swapped_gap": pl.Float64,
              "max_abs_delta": pl.Float64}
    return pl.DataFrame(rows, schema=schema).select(COLUMNS)


# ----------------------------------------------------------------------------- latency
class _Timed(Retriever):
    """A retriever that scores exactly as ``inner`` and records each query's seconds."""

    def __init__(self, inner: Retriever, setting: str, recorder: "LatencyRecorder"):
        self.inner, self.setting, self.recorder = inner, setting, recorder
        self.name, self.backend = inner.name, inner.backend

    def score_many(self, queries, candidate_lists, query_ids=None, candidate_ids=None):
        inner, qids = self.inner, list(query_ids) if query_ids is not None else list(map(str, range(len(queries))))
        if isinstance(inner, DenseRetriever):
            out = inner.score_many(queries, candidate_lists, query_ids, candidate_ids)
            self.recorder.time_encoder(inner, self.setting, queries, candidate_lists, qids)
            return out
        if type(inner).score_many is not Retriever.score_many:   # a run file, or batched scoring
            self.recorder.untimed.add(inner.name)
            return inner.score_many(queries, candidate_lists, query_ids, candidate_ids)
        out = []
        for i, (q, c) in enumerate(zip(queries, candidate_lists)):  # the base class's own per-query loop
            t0 = time.perf_counter()
            out += inner.score_many([q], [c], [qids[i]], None if candidate_ids is None else [candidate_ids[i]])
            self.recorder.add(inner.name, self.setting, qids[i], time.perf_counter() - t0)
        return out


class LatencyRecorder:
    """Collects ``(retriever, setting, query_id, seconds)`` in the timed ``settings``
    (``evaluate.latency_settings``; None: all); ``wrap(r, setting)`` is what
    ``evaluate_stage.score_retrievers`` scores with (``r`` itself in a setting not timed)."""

    def __init__(self, settings: Sequence[str] | None = None):
        self.settings = None if settings is None else tuple(settings)
        self.rows: list[tuple[str, str, str, float]] = []
        self.untimed: set[str] = set()

    def wrap(self, retriever: Retriever, setting: str) -> Retriever:
        if self.settings is not None and setting not in self.settings:
            return retriever
        return _Timed(retriever, setting, self)

    def add(self, retriever: str, setting: str, query_id: str, seconds: float) -> None:
        self.rows.append((retriever, setting, str(query_id), float(seconds)))

    def time_encoder(self, r: DenseRetriever, setting: str, queries, candidate_lists, query_ids) -> None:
        """Per query: one embedding of the query text (no store) and its cosine with the candidates'
        vectors (from the store, untimed: the index)."""
        flat = [c for cl in candidate_lists for c in cl]
        D = embed.embed(r.encoder, flat, r.store, kind="document", batch_size=r.batch_size).astype(np.float64)
        s = 0
        for q, cl, qid in zip(queries, candidate_lists, query_ids):
            t0 = time.perf_counter()
            v = r.encoder.encode([q], kind="query", batch_size=1)[0].astype(np.float64)
            _ = D[s: s + len(cl)] @ v
            self.add(r.name, setting, qid, time.perf_counter() - t0)
            s += len(cl)

    def frame(self) -> pl.DataFrame:
        return pl.DataFrame(self.rows, schema={"retriever": pl.Utf8, "setting": pl.Utf8, "query_id": pl.Utf8,
                                               "seconds": pl.Float64}, orient="row")


def latency_summary(latency: pl.DataFrame) -> pl.DataFrame:
    """Per (retriever, setting): timed queries, median, 95th percentile (linear interpolation) and
    mean seconds per query, fastest first."""
    return (latency.group_by("retriever", "setting")
            .agg(pl.len().alias("n_queries"), pl.col("seconds").median().alias("median_s"),
                 pl.col("seconds").quantile(0.95, interpolation="linear").alias("p95_s"),
                 pl.col("seconds").mean().alias("mean_s"))
            .sort("setting", "median_s", "retriever"))


def pareto_front(points: pl.DataFrame) -> pl.DataFrame:
    """``points`` (``retriever``, ``median_s``, ``mean``) with ``model_class``
    (:func:`saber_lib.retrieval.registry.retriever_class`) and ``on_front``: no other retriever of its class
    is at least as fast and at least as good and strictly better in one of the two (equal points
    are both on the front). Sorted by class, then time."""
    df = points.with_columns(pl.col("retriever").map_elements(retriever_class, return_dtype=pl.Utf8)
                             .alias("model_class"))
    on = []
    for t, m, c in df.select("median_s", "mean", "model_class").iter_rows():
        o = df.filter(pl.col("model_class") == c)
        dominated = ((o["median_s"] <= t) & (o["mean"] >= m) & ((o["median_s"] < t) | (o["mean"] > m))).any()
        on.append(not dominated)
    return df.with_columns(pl.Series("on_front", on, dtype=pl.Boolean)).sort("model_class", "median_s", "retriever")


def latency_points(summary_lat: pl.DataFrame, summary: pl.DataFrame, setting: str = MAIN_SETTING) -> pl.DataFrame:
    """Per retriever timed in ``setting``: median seconds per query, overall nDCG mean and interval,
    its class and whether it is on its class's latency-quality front (:func:`pareto_front`)."""
    q = summary.filter((pl.col("setting") == setting) & (pl.col("group") == "Overall")).select(
        "retriever", "mean", "lo", "hi")
    df = summary_lat.filter(pl.col("setting") == setting).select("retriever", "median_s").join(q, on="retriever")
    return pareto_front(df).select("model_class", "retriever", "median_s", "mean", "lo", "hi", "on_front")


def latency_quality_figure(summary_lat: pl.DataFrame, summary: pl.DataFrame, k: int, level: float,
                           setting: str = MAIN_SETTING):
    """One point per retriever: median seconds per query (log x) against its overall nDCG@k in
    ``setting`` with the bootstrap interval, coloured by model class, and each class's Pareto front
    (:func:`pareto_front`) as a staircase through its undominated points."""
    import matplotlib.pyplot as plt  # pyplot only once saber_lib.plots has chosen the backend
    import seaborn as sns  # optional plotting package

    df = latency_points(summary_lat, summary, setting)
    fig, ax = plt.subplots(figsize=(6.2, 4.2))
    if df.height:
        known = retriever_classes()   # every registered class, in registration order: stable colours
        classes = [c for c in known if c in set(df["model_class"])]
        palette = dict(zip(known, sns.color_palette("colorblind", len(known))))
        x, m = df["median_s"].to_numpy(), df["mean"].to_numpy()
        ax.errorbar(x, m, yerr=np.vstack([m - df["lo"].to_numpy(), df["hi"].to_numpy() - m]), fmt="none",
                    ecolor="0.6", capsize=3, zorder=1)
        sns.scatterplot(x=x, y=m, hue=df["model_class"].to_list(), hue_order=classes, palette=palette,
                        style=df["on_front"].to_list(), markers={True: "o", False: "X"}, ax=ax, s=60, zorder=3, legend=False)
        for c in classes:
            f = df.filter(pl.col("on_front") & (pl.col("model_class") == c)).sort("median_s")
            if f.height > 1:
                ax.step(f["median_s"].to_numpy(), f["mean"].to_numpy(), where="post", color=palette[c], lw=1.2,
                        zorder=2)
        for xi, yi, name in zip(x, m, df["retriever"]):
            ax.annotate(name, (xi, yi), textcoords="offset points", xytext=(5, 4), fontsize=8)
        from matplotlib.lines import Line2D  # only this legend needs it

        handles = [Line2D([], [], color=palette[c], marker="o", lw=1.2) for c in classes]
        handles.append(Line2D([], [], color="0.3", marker="X", lw=0))
        ax.legend(handles, classes + ["dominated in its class"], fontsize=7, title="class (line: its Pareto front)",
                  title_fontsize=7, loc="best")
    ax.set_xscale("log")
    ax.set_xlabel(f"median seconds per query ({setting}, log scale)")
    ax.set_ylabel(f"nDCG@{k} ({setting}), {int(level * 100)}% CI")
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- instruction arms
class InstructedRetriever(Retriever):
    """An encoder retriever whose queries carry an instruction arm (documents unchanged)."""

    def __init__(self, inner: DenseRetriever, arm: str):
        instructed("", arm)   # an unknown arm fails here, naming the known ones
        self.inner, self.arm = inner, arm
        self.name, self.backend = inner.name, inner.backend

    def score_many(self, queries, candidate_lists, query_ids=None, candidate_ids=None):
        return self.inner.score_many([instructed(q, self.arm) for q in queries], candidate_lists,
                                     query_ids, candidate_ids)


def armed(names: Sequence[str]) -> list[str]:
    """The retrievers the arms apply to: the encoders (lexical ones and run files take no instruction)."""
    return [n for n in names if n in embed.REGISTRY]


def arm_rows(p0: pl.DataFrame, arm_ndcg: dict[str, pl.DataFrame], *, n_permutations: int, seed: int) -> pl.DataFrame:
    """``retriever, arm, setting, ndcg, delta_vs_p0, p_value`` from the per-query nDCG of ``p0`` and
    of each arm (same columns as the stage's ``ndcg`` table): mean nDCG, the mean of the per-query
    differences arm - p0 over the queries both scored, and the two-sided paired sign-flip p-value
    (stream ``rng_for(seed, "instruction-arms", retriever, arm, setting)``). ``p0`` rows: delta 0,
    no p-value."""
    rows = []
    keys = ["retriever", "setting", "query_id"]
    for (r, s), g in p0.sort(keys).group_by(["retriever", "setting"], maintain_order=True):
        rows.append((r, "p0", s, float(g["ndcg"].mean()), 0.0, None))
        for arm, nd in arm_ndcg.items():
            j = g.join(nd.filter((pl.col("retriever") == r) & (pl.col("setting") == s)), on=keys, suffix="_arm")
            if not j.height:
                continue
            d = (j["ndcg_arm"] - j["ndcg"]).to_numpy()[None, :]
            p = sign_flip_pvalues(d, np.array([d.shape[1]]), n_permutations, rng_for(seed, "instruction-arms", r, arm, s))
            rows.append((r, arm, s, float(j["ndcg_arm"].mean()), float(d.mean()), float(p[0])))
    return pl.DataFrame(rows, schema={"retriever": pl.Utf8, "arm": pl.Utf8, "setting": pl.Utf8, "ndcg": pl.Float64,
                                      "delta_vs_p0": pl.Float64, "p_value": pl.Float64}, orient="row")


def arm_ndcg(names: Sequence[str], arms: Sequence[str], inputs, settings: Sequence[str], *, k: int, tie_policy: str,
             store=None, max_chunks=None, cache_dir=None, log=print) -> dict[str, pl.DataFrame]:
    """arm -> the per-query nDCG (the stage's ``ndcg`` columns) of every encoder of ``names`` scored with
    that arm in every setting, for each arm of ``arms`` other than ``p0``."""
    others = [a for a in dict.fromkeys(arms) if a != "p0"]
    per_arm: dict[str, list[pl.DataFrame]] = {a: [] for a in others}
    for name in armed(names):
        base = get_retriever(name, store=store, max_chunks=max_chunks, cache_dir=cache_dir)
        for arm in others:
            t0 = time.perf_counter()
            wrapped = InstructedRetriever(base, arm)
            scores = pl.concat([score_benchmark(wrapped, inputs.benchmark, inputs.corpus, s, queries=inputs.queries)
                                for s in settings])
            per_arm[arm].append(evaluate.ndcg_table(scores, inputs.ratings, k=k, tie_policy=tie_policy))
            if log:
                log(f"{name:>22} {arm}: {time.perf_counter() - t0:6.1f} s")
    return {a: pl.concat(v) for a, v in per_arm.items() if v}


def instruction_arms(names: Sequence[str], arms: Sequence[str], inputs, settings: Sequence[str], ndcg: pl.DataFrame,
                     *, k: int, tie_policy: str, n_permutations: int, seed: int, store=None, max_chunks=None,
                     cache_dir=None, log=print, per_arm: dict[str, pl.DataFrame] | None = None) -> pl.DataFrame:
    """Every encoder of ``names`` scored with each arm of ``arms`` other than ``p0`` in every setting
    (:func:`arm_ndcg`, or ``per_arm`` when it was computed already), compared with its ``p0`` rows of
    the stage's ``ndcg`` table (:func:`arm_rows`)."""
    if per_arm is None:
        per_arm = arm_ndcg(names, arms, inputs, settings, k=k, tie_policy=tie_policy, store=store,
                           max_chunks=max_chunks, cache_dir=cache_dir, log=log)
    others = [a for a in dict.fromkeys(arms) if a != "p0"]
    p0 = ndcg.filter(pl.col("retriever").is_in(armed(names)))
    out = arm_rows(p0, per_arm, n_permutations=n_permutations, seed=seed)
    order = {a: i for i, a in enumerate(["p0", *others])}
    return out.with_columns(pl.col("arm").replace_strict(order, return_dtype=pl.Int64).alias("_o")).sort(
        "retriever", "setting", "_o").drop("_o")


def arms_table(arms: pl.DataFrame, setting: str = MAIN_SETTING) -> pl.DataFrame:
    """Encoders x arms in one setting: mean nDCG and, after p0, ``delta (p)``; and each encoder's
    envelope role (``embed.ENVELOPES``)."""
    sub = arms.filter(pl.col("setting") == setting)
    rows = []
    for r in sub["retriever"].unique(maintain_order=True):
        g = sub.filter(pl.col("retriever") == r)
        row = {"model": r, "role": embed.envelope(r).arms}
        for arm, nd, d, p in g.select("arm", "ndcg", "delta_vs_p0", "p_value").iter_rows():
            row[arm] = f"{nd:.3f}" if arm == "p0" else f"{nd:.3f} ({d:+.3f}, p={p:.3f})"
        rows.append(row)
    return pl.DataFrame(rows)


# ----------------------------------------------------------------------------- the stage's report
_REPORT_KEYS = ("rescaling_schemes", "instruction_arms", "arm_permutations", "ndcg_k", "tie_policy", "ci_level", "seed",
                "settings", "retrievers", "embed_max_chunks", "cache_dir", "stability_splits", "stability_subsets",
                "stability_permutations", "stability_alpha", "stability_target")


def report(ctx, params: dict, inputs, scores: pl.DataFrame, ndcg: pl.DataFrame, summary: pl.DataFrame,
           latency: LatencyRecorder, store, caption_tail: str) -> list[pl.DataFrame]:
    """The four analyses as ``09_evaluate`` writes them (``params``: the notebook's parameters,
    ``ctx.parameters(globals())``): ``rescaling.parquet`` and its table, ``latency.parquet`` (a timing table) with
    its table and the ``latency_quality`` figure, and, with an arm besides p0 and an encoder
    evaluated, ``instruction_arms.parquet`` and its table; the query-set stability of the retrievers' order
    (:func:`saber_lib.evaluate.stability.write_stability`). Returns the tables to display."""
    missing = [k for k in _REPORT_KEYS if k not in params]
    if missing:
        raise KeyError(f"evaluate.analyses.report: parameters {missing} not given")
    p = {k: params[k] for k in _REPORT_KEYS}
    k, shown = p["ndcg_k"], []
    top = rating_scale(ctx, inputs.on_release)
    resc = rescaling_table(ndcg, scores, inputs.ratings, p["rescaling_schemes"], top=top, k=k, tie_policy=p["tie_policy"])
    resc.write_parquet(ctx.path("rescaling.parquet"))
    ctx.save_table(resc, "evaluate_rescaling", float_fmt="{:.4f}", caption=(
        f"Rescaling robustness ({inputs.source} benchmark): the retrievers' mean nDCG@{k} ({MAIN_SETTING}) with the "
        f"ratings mapped from [0, {top:g}] onto each scheme's scale ('round': to whole levels) and the scheme's gain, "
        f"against the benchmark's own scale with exponential gain; swapped pairs out of the retriever pairs "
        f"compared (system_pairs: a pair with a mean that could not be computed is not compared, and then the "
        f"correlations are NaN). "
        + caption_tail))
    shown.append(resc)
    lat_rows = latency.frame()
    lat_rows.write_parquet(ctx.path("latency.parquet"))   # data.TIMING_FILES: outside the output hash
    ctx.record(latency_untimed=sorted(latency.untimed))
    lat = latency_summary(lat_rows)
    if lat.height:
        ctx.save_table(lat, "evaluate_latency", float_fmt="{:.4g}", caption=(
            "Seconds per query (median, 95th percentile, mean) of each retriever and setting on this machine "
            "(a lexical retriever: its whole per-query call; an encoder: the query's embedding and cosine, the "
            "candidates' vectors being its index); run-to-run noise, outside the stage's output hash. " + caption_tail))
        fig = latency_quality_figure(lat, summary, k, p["ci_level"])
        ctx.save_figure(fig, "latency_quality", backends=inputs.judge, caption=(
            f"Median seconds per query (log scale) against nDCG@{k} ({MAIN_SETTING}) with its "
            f"{int(p['ci_level'] * 100)}% bootstrap interval, one point per retriever, coloured by model class; "
            f"the line of a class joins its Pareto front (no faster and better retriever of the class; x: dominated). "
            + caption_tail))
        front = latency_points(lat, summary)
        ctx.save_table(front, "evaluate_latency_pareto", float_fmt="{:.4g}", caption=(
            f"Latency-quality Pareto front per model class ({MAIN_SETTING}): median seconds per query, mean "
            f"nDCG@{k} with its interval, and whether no retriever of the same class is at least as fast and as good "
            f"and better in one (timings: this machine, run-to-run noise). " + caption_tail))
        shown.append(lat)
    if [a for a in p["instruction_arms"] if a != "p0"] and armed(p["retrievers"]):
        per_arm = arm_ndcg(p["retrievers"], p["instruction_arms"], inputs, p["settings"], k=k, tie_policy=p["tie_policy"],
                           store=store, max_chunks=p["embed_max_chunks"] or None, cache_dir=p["cache_dir"])
        arms = instruction_arms(p["retrievers"], p["instruction_arms"], inputs, p["settings"], ndcg, k=k,
                                tie_policy=p["tie_policy"], n_permutations=p["arm_permutations"], seed=p["seed"],
                                per_arm=per_arm)
        arms.write_parquet(ctx.path("instruction_arms.parquet"))
        shown += arm_summaries.write_summaries(ctx, ndcg, per_arm, inputs.query_domains, k=k, setting=MAIN_SETTING,
                                               caption_tail=caption_tail)
        tab = arms_table(arms)
        ctx.save_table(tab, "evaluate_instruction_arms", caption=(
            f"Instruction arms: nDCG@{k} ({MAIN_SETTING}) per arm and, after p0, the mean difference to p0 with the "
            f"paired sign-flip p-value ({p['arm_permutations']} draws, or exact); role 'control': the model has no "
            f"instruction slot, the arm's text is prepended all the same. " + caption_tail))
        shown.append(tab)
    shown.append(stability.write_stability(ctx, ndcg, p, caption_tail, backends=inputs.judge))
    return shown
