"""The robustness stage's computations, one function per section of ``15_robustness``: each takes the
notebook's parameters (``params``: ``ctx.parameters(globals())``, the stage's keys checked against the schema)
and this run's artifacts, and returns the frames to write with their table captions. The notebook
writes, shows and plots them.

* :func:`intervals_section` - nDCG intervals under both rating-draw methods and swap probabilities;
* :func:`panel_section` - judges' flip rates, order effects and agreement on sampled pairs;
* :func:`memorization_section` - the memorization probe against its control retriever;
* :func:`stopping_section` - judging that stops, on this run and on a simulated benchmark.
"""
from __future__ import annotations

import time
from typing import Mapping

import polars as pl

from ..judging.draws import rating_draws
from ..judging.registry import JudgeContext, JudgeSettings
from ..judging.spec_judges import judge_from_profile
from ..judging.tournament import corpus_docs
from ..evaluate.retrievers import get_retriever
from . import memorization, order_effect, panel
from .rewriters import default_rewriters
from .intervals import ndcg_two_level

DRAW_METHODS = ("outcomes", "judgments")


def intervals_section(params: Mapping, judgments, ratings, draws, scores, backends: str,
                      tournament_judge: str = "") -> dict:
    """The tournament's rating draws and those of the other draw method (computed here): per method
    the two-level and query-only intervals (``intervals``) and swap probabilities (``swaps``);
    ``methods`` = (the tournament's, the other); ``table`` and ``caption`` for the width table,
    ``swap_caption`` for :func:`swap_figure`."""
    start = time.perf_counter()
    method = params["rating_draw_method"]
    other = "outcomes" if method == "judgments" else "judgments"
    draws_other = rating_draws(judgments, ratings, n_draws=params["rating_draws"], seed=params["seed"],
                               alpha=params["bt_alpha"], top=params["rating_top"], method=other, progress=False)
    intervals, swaps = [], []
    for m, dr in ((method, draws), (other, draws_other)):
        unc = ndcg_two_level(scores, ratings, dr, k=params["ndcg_k"], n_boot=params["n_bootstrap"],
                                         level=params["ci_level"], seed=params["seed"], progress=False)
        intervals.append(unc.summary.select(pl.lit(m).alias("draw_method"), pl.all()))
        swaps.append(unc.swaps.select(pl.lit(m).alias("draw_method"), pl.all()))
    intervals = pl.concat(intervals)
    table = intervals.select("draw_method", "retriever", "mean", "width_query_only", "width_two_level",
                             "width_added_by_judge", "judge_variance_share").sort("draw_method", "retriever")
    caption = (f"nDCG@{params['ndcg_k']} ({params['rob_setting']}): {int(params['ci_level'] * 100)}% intervals over "
               f"queries only and two-level (queries, then a rating draw), the width the judge adds and the judge's "
               f"share of the two-level variance; {params['n_bootstrap']} resamples, {params['rating_draws']} rating draws per query. "
               f"{backends}.")
    swap_caption = (f"Probability that two retrievers swap order under the two-level bootstrap "
                    f"(nDCG@{params['ndcg_k']}, {params['rob_setting']}); ratings judged by {tournament_judge}.")
    return {"intervals": intervals, "swaps": pl.concat(swaps), "methods": (method, other), "table": table,
            "caption": caption, "swap_caption": swap_caption, "seconds": time.perf_counter() - start}


def load_inputs(ctx, setting: str) -> tuple:
    """This run's artifacts the stage reads, through ``ctx.input``: ``(corpus, benchmark, judgments,
    ratings, rating draws, scores of ``setting``, docs of the benchmark's queries and candidates)``."""
    corpus = pl.read_parquet(ctx.input("corpus", "corpus.parquet"))
    bench = pl.read_parquet(ctx.input("select", "benchmark.parquet"))
    tour = [pl.read_parquet(ctx.input("tournament", f)) for f in ("judgments.parquet", "ratings.parquet",
                                                                  "rating_draws.parquet")]
    scores = pl.read_parquet(ctx.input("evaluate", "scores.parquet")).filter(pl.col("setting") == setting)
    docs = corpus_docs(corpus, set(bench["query_id"]) | set(bench["cand_id"]))
    return (corpus, bench, *tour, scores, docs)


def swap_figure(swaps, methods):
    """One heat map per draw method of the two-level swap probabilities (:func:`swap_matrix`)."""
    import matplotlib.pyplot as plt  # pyplot and seaborn only once saber_lib.plots has chosen the backend
    import seaborn

    fig, axes = plt.subplots(1, len(methods), figsize=(5 * len(methods), 4.2), squeeze=False)
    for ax, method in zip(axes[0], methods):
        names, mat = swap_matrix(swaps, method)
        seaborn.heatmap(mat.drop("retriever").to_numpy(), ax=ax, vmin=0, vmax=0.5, cmap="rocket_r", annot=True,
                        fmt=".2f", xticklabels=names, yticklabels=names, cbar=ax is axes[0][-1],
                        annot_kws={"fontsize": 7})
        ax.set_title(f"P(swap), two-level, draws: {method}", fontsize=9)
    fig.tight_layout()
    return fig


def flip_figure(flips):
    """Bars of the flip rate per transformation, one colour per judge."""
    import matplotlib.pyplot as plt  # pyplot and seaborn only once saber_lib.plots has chosen the backend
    import seaborn

    fig, ax = plt.subplots(figsize=(8, 3.6))
    seaborn.barplot(x=flips["transformation"].to_list(), y=flips["flip_rate"].to_list(),
                    hue=flips["judge"].to_list(), ax=ax)
    ax.set_ylabel("flip rate")
    ax.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    return fig


def swap_matrix(swaps, method: str) -> tuple[list[str], pl.DataFrame]:
    """Retriever names and the symmetric matrix of two-level swap probabilities of one draw method
    (``retriever`` column, then one column per retriever; null on the diagonal)."""
    s = swaps.filter(pl.col("draw_method") == method)
    names = sorted(set(s["retriever_1"]) | set(s["retriever_2"]))
    row, col = "\0row", "\0col"   # names no retriever has (a retriever may be called "a")
    both = pl.concat([s.select(pl.col("retriever_1").alias(row), pl.col("retriever_2").alias(col), "p_swap_two_level"),
                      s.select(pl.col("retriever_2").alias(row), pl.col("retriever_1").alias(col), "p_swap_two_level")])
    wide = both.pivot(on=col, index=row, values="p_swap_two_level")
    mat = pl.DataFrame({row: names}).join(wide, on=row, how="left").select(
        pl.col(row).alias("retriever"), *names)
    return names, mat


def panel_section(params: Mapping, judgments, docs, *, store=None, backend=None, tournament_judge: str = "") -> dict:
    """Every judge of the panel on pairs sampled from the tournament (as shown, swapped, after each
    rewrite), the order effect per judge and on the tournament's judgments, and the agreement between
    judges. Returns the panel study's frames (``flips``, ``verdicts``, ``order``, ``kappa``, ``alpha``),
    ``judges`` (key -> name), ``notes``, ``n_pairs``, ``panel_line`` and the captions."""
    start = time.perf_counter()
    rewriters = {k: v for k, v in default_rewriters().items() if k in params["flip_transformations"]}
    pairs = panel.sample_judged_pairs(judgments, max(params["flip_pairs"], params["flip_slow_pairs"]), params["seed"])
    judges, pairs_by_judge, notes = panel.build_panel(
        params["flip_judges"], params["flip_slow_judges"], pairs, params["flip_pairs"], params["flip_slow_pairs"],
        JudgeContext(JudgeSettings.from_params(params), backend, store=store))
    study = panel.judge_panel(judges, pairs_by_judge, docs, rewriters)
    names = {k: j.name for k, j in judges.items()}
    line = "judges: " + ", ".join(f"{k}={v} ({len(pairs_by_judge[k])} pairs)" for k, v in names.items())
    tour = order_effect.order_effect_table(judgments, alpha=params["bt_alpha"]).with_columns(
        (pl.lit("tournament: ") + pl.col("judge")).alias("judge"))
    order = pl.concat([study["order"], tour]) if study["order"].height else tour
    return {**study, "order": order, "judges": names, "notes": notes, "n_pairs": len(pairs), "panel_line": line,
            "flip_table": study["flips"].select("judge", "transformation", "compared", "changed", "flips",
                                                "flip_rate", "flip_rate_changed", "failures"),
            "flip_caption": f"Flip rates per judge and transformation on pairs sampled from the tournament; {line}. "
                            f"Proxy judges are CPU stand-ins; 'simulated' reads ids only.",
            "flip_figure_caption": f"Flip rate per judge and transformation; {line}.",
            "order_caption": f"First-shown advantage per judge (Bradley-Terry with an order term, +-1.96 se); {line}; "
                             f"and the tournament's judgments ({tournament_judge}).",
            "kappa_caption": f"Cohen's kappa between judges on the sampled pairs (Krippendorff's alpha over all "
                             f"judges: {study['alpha']:.3f}); {line}.", "seconds": time.perf_counter() - start}


def memorization_names(params: Mapping) -> list[str]:
    """The probed retrievers: ``mem_retrievers`` (``[]``: ``retrievers``) without TREC runs, and the
    control ``mem_control`` (added when missing)."""
    names = [n for n in (params["mem_retrievers"] or params["retrievers"]) if not n.startswith("run:")]
    return names + ([params["mem_control"]] if params["mem_control"] not in names else [])


def memorization_section(params: Mapping, corpus, ratings, *, store=None, backend=None,
                         tournament_judge: str = "") -> dict:
    """The memorization probe (:mod:`.memorization`) of :func:`memorization_names` against the
    control: ``table``, ``per_query``, ``variants``, ``retrievers`` (name -> backend) and ``caption``
    (the control, the test, Holm's family and the flag rule)."""
    start = time.perf_counter()
    rets = {n: get_retriever(n, k1=params["bm25_k1"], b=params["bm25_b"], store=store,
                             max_chunks=params["embed_max_chunks"] or None, cache_dir=params["cache_dir"])
            for n in memorization_names(params)}
    every = default_rewriters()
    llm = backend if params["mem_llm_paraphrase"] else None
    table, per_query, variants = memorization.memorization_probe(
        rets, corpus, ratings, setting=params["rob_setting"], k=params["ndcg_k"],
        rewriters={k: every[k] for k in params["mem_variants"]}, llm_backend=llm,
        llm_retries=params["mem_paraphrase_retries"], n_perm=params["mem_permutations"],
        max_failure_rate=(params.get("llm") or {}).get("max_failure_rate") if llm else None,
        n_boot=params["n_bootstrap"], level=params["ci_level"], seed=params["seed"], alpha=params["mem_alpha"],
        control=params["mem_control"])
    ret_line = "retrievers: " + ", ".join(f"{k}={r.backend}" for k, r in rets.items())
    caption = (f"Memorization probe: nDCG@{params['ndcg_k']} ({params['rob_setting']}) on original and rewritten "
               f"queries, mean drop with {int(params['ci_level'] * 100)}% bootstrap interval; "
               f"{memorization.flag_rule(table, params['mem_alpha'])}; {ret_line}; ratings judged by {tournament_judge}"
               + ("; LLM paraphrase by " + backend.describe().get("model", "") if llm else "") + ".")
    return {"table": table, "per_query": per_query, "variants": variants,
            "retrievers": {k: r.backend for k, r in rets.items()}, "caption": caption,
            "seconds": time.perf_counter() - start}


def stopping_section(params: Mapping, bench, judgments, ratings, scores, docs, *, backend=None,
                     backends: str = "") -> dict:
    """Judging that stops (rule from the ``stop_*`` keys) on this run's tournament (Swiss only; the
    tournament's judge, an LLM's calls from its cache) and on a simulated benchmark. Returns
    ``summary`` and ``systems`` (None when neither ran), ``notes`` and ``caption``."""
    start = time.perf_counter()
    rule = dict(rule=params["stop_rule"], tol=params["stop_tol"], min_shrink=params["stop_min_shrink"],
                window=params["stop_window"], min_rounds=params["stop_min_rounds"], n_draws=params["stop_draws"])
    common = dict(rounds=params["rounds"], seed=params["seed"], alpha=params["bt_alpha"], top=params["rating_top"],
                  k=params["ndcg_k"], test_alpha=params["stop_alpha"], n_permutations=params["stop_permutations"],
                  **rule)
    parts, systems, notes = [], [], []
    if params["stop_on_run"] and params["schedule"] == "swiss":
        on_run = panel.stopping_on_run(bench, judgments, ratings, scores,
                                       judge_from_profile(JudgeSettings.from_params(params), backend), docs,
                                       **common)
        parts.append(on_run["summary"])
        systems.append(on_run["systems"])
    elif params["stop_on_run"]:
        notes.append(f"stopping on this run skipped: the tournament's schedule is {params['schedule']!r}, not swiss")
    if params["stop_sim_queries"]:
        on_sim = panel.stopping_on_simulation(n_queries=params["stop_sim_queries"],
                                              n_cands=params["stop_sim_candidates"], qualities=panel.SIM_QUALITIES,
                                              agreement=params["judge_sim_agreement"], **common)
        parts.append(on_sim["summary"])
        systems.append(on_sim["systems"])
    if not parts:
        return {"summary": None, "systems": None, "notes": notes, "caption": "", "seconds": time.perf_counter() - start}
    summary = pl.concat(parts)
    rule_line = ", ".join(f"{k}={v}" for k, v in rule.items())
    caption = (f"Judging that stops ({rule_line}) against plain Swiss at R = {params['rounds']}: judgments, "
               f"Kendall tau of the system orders by mean nDCG@{params['ndcg_k']}, largest nDCG change, and the "
               f"conclusions: significant pairwise differences of plain Swiss (paired sign-flip, Holm, alpha = "
               f"{params['stop_alpha']}) and how many stopping keeps, whether order and all of them are kept, and "
               f"the share of judgments it needed then; judges: "
               + ", ".join(summary["judge"].to_list()) + f". {backends}.")
    return {"summary": summary, "systems": pl.concat(systems), "notes": notes, "caption": caption,
            "seconds": time.perf_counter() - start}


def timings(**sections) -> dict:
    """``<section>_s``: each section's seconds (its ``seconds`` entry), rounded, for the manifest."""
    return {f"{k}_s": round(v["seconds"], 1) for k, v in sections.items()}
