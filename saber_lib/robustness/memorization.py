"""Memorization probe for retrievers: do they lose more than a control when a query is reworded?

Each query gets rewritten variants that keep its mathematics (the deterministic rewriters of
:mod:`saber_lib.robustness.rewriters`, and an LLM paraphrase when a backend is given); every
retriever then scores the query's candidates for the original and for each variant, and nDCG@k is
computed against the same ratings. A retriever that learned the benchmark's own wording should
lose more on rewrites than one that did not.

A rewrite that removes lexical overlap lowers the score of any retriever, memorized or not, so a
drop alone says little. The probe compares each retriever with a **control**: a retriever that
cannot have seen the benchmark (lexical BM25 by default, fitted per query on its candidates).
Per retriever ``r`` and variant, over the queries the variant actually changed (the same queries for
every retriever)::

    drop_r(q)   = nDCG_r(q, original) - nDCG_r(q, rewritten)
    excess_r(q) = drop_r(q) - drop_control(q)

reported with percentile bootstrap intervals of both means (:func:`saber_lib.metrics.resample.bootstrap_ci`),
and a paired sign-flip randomization test of ``mean excess = 0`` (two-sided,
:func:`saber_lib.metrics.resample.sign_flip_pvalues`: exact enumeration of all sign patterns
when there are at most ``log2(n_perm)`` queries, else ``n_perm`` random patterns from the stream
``rng_for(seed, "memorization", retriever, variant)``, the p-value capped by Hoeffding's bound). The raw p-values of all tests
(every retriever but the control, every variant and ``pooled``) are adjusted together by Holm's
step-down method (:func:`saber_lib.metrics.resample.holm`). A retriever is flagged for a variant
when it survives both: its mean excess drop is positive and its Holm-adjusted p-value is below
``alpha``. The variant ``pooled`` averages, per query, the drops of all variants that changed it.

Retrievers: any object with the interface of :class:`saber_lib.retrieval.Retriever`
(``score_many(queries, candidate_lists, query_ids=..., candidate_ids=...)`` or
``score(query, candidates)``).
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import polars as pl

from ..metrics.resample import bootstrap_ci
from ..metrics.ndcg import ndcg_at_k
from ..metrics.resample import sign_flip_pvalues
from ..core.seeds import rng_for
from ..metrics.resample import holm
from ..llm.budget import check_failure_budget
from ..core.text import setting_texts
from .invariance import LLMRewriter
from .rewriters import Rewriter, default_rewriters

DEFAULT_VARIANTS = ("rename_variables", "latex_to_words", "number_decimal", "sentence_order")


def query_variants(corpus, query_ids: Sequence[str], rewriters: Mapping[str, Rewriter] | None = None,
                   llm_backend=None, llm_retries: int = 1, max_failure_rate: float | None = None) -> pl.DataFrame:
    """Rewritten versions of each query: ``query_id, variant, problem, solution, changed``.

    ``corpus``: ``doc_id, problem, solution``; ``rewriters``: name -> rewriter (default: variable
    renaming, LaTeX as words, decimal numbers, sentence order); each rewrites a query's problem and
    solution as one group (one renaming for both). ``llm_backend``: adds the variant
    ``llm_paraphrase`` (:class:`~saber_lib.robustness.invariance.LLMRewriter`, one batch for all
    queries; an empty or failed paraphrase is asked again ``llm_retries`` times, then keeps the
    original; with ``max_failure_rate`` (``llm.max_failure_rate``) more failed texts than that share
    raise :class:`~saber_lib.llm.FailureBudgetExceeded` instead of a probe on unchanged queries). The
    original is the variant ``original``."""
    if rewriters is None:
        allr = default_rewriters()
        rewriters = {k: allr[k] for k in DEFAULT_VARIANTS}
    texts = {d: (p or "", s or "") for d, p, s in corpus.select("doc_id", "problem", "solution").iter_rows()}
    missing = [q for q in query_ids if q not in texts]
    if missing:
        raise KeyError(f"{len(missing)} queries not in the corpus, e.g. {missing[:3]}")
    rows = [(q, "original", *texts[q], False) for q in query_ids]
    for name, rw in rewriters.items():
        for q in query_ids:
            p, s = rw.rewrite_group(list(texts[q]))
            rows.append((q, name, p, s, (p, s) != texts[q]))
    if llm_backend is not None:
        rw = LLMRewriter(llm_backend, retries=llm_retries)
        flat = [t for q in query_ids for t in texts[q]]
        new = rw.rewrite_group(flat)
        if max_failure_rate is not None:
            check_failure_budget(sum(1 for t in flat if t.strip()), rw.failures, rw.failure_reasons,
                                 max_rate=max_failure_rate, stage="robustness (LLM paraphrase)")
        for k, q in enumerate(query_ids):
            p, s = new[2 * k], new[2 * k + 1]
            rows.append((q, rw.name, p, s, (p, s) != texts[q]))
    return pl.DataFrame(rows, schema={"query_id": pl.String, "variant": pl.String, "problem": pl.String,
                                      "solution": pl.String, "changed": pl.Boolean}, orient="row")


def _score(retriever, queries, cand_lists, query_ids, cand_ids):
    if hasattr(retriever, "score_many"):
        return retriever.score_many(queries, cand_lists, query_ids=query_ids, candidate_ids=cand_ids)
    return [np.asarray(retriever.score(q, c), dtype=float) for q, c in zip(queries, cand_lists)]


def evaluate_variants(retrievers, variants, corpus, ratings, *, setting: str = "statement-full",
                      k: int = 10) -> pl.DataFrame:
    """nDCG@k of every retriever on every query variant: ``retriever, variant, query_id, changed,
    ndcg``. ``retrievers``: name -> retriever (or a list; names from ``.name``); ``ratings``:
    ``query_id, cand_id, rating`` (+ ``position`` for the candidate order and tie-break)."""
    if not isinstance(retrievers, Mapping):
        retrievers = {getattr(r, "name", f"retriever{i}"): r for i, r in enumerate(retrievers)}
    texts = {d: (p, s) for d, p, s in corpus.select("doc_id", "problem", "solution").iter_rows()}
    r = ratings.sort("query_id", "position") if "position" in ratings.columns else ratings.sort("query_id", "cand_id")
    cands = {q: (g["cand_id"].to_list(), g["rating"].to_numpy())
             for (q,), g in r.group_by(["query_id"], maintain_order=True)}
    v = variants.filter(pl.col("query_id").is_in(list(cands)))
    rows = []
    qids = v["query_id"].to_list()
    cid_lists = [cands[q][0] for q in qids]
    ctexts = [[setting_texts(setting, *texts[c])[1] for c in cl] for cl in cid_lists]
    qtexts = [setting_texts(setting, p, s)[0] for p, s in v.select("problem", "solution").iter_rows()]
    for name, ret in retrievers.items():
        scores = _score(ret, qtexts, ctexts, qids, cid_lists)
        for (q, var, ch), sc in zip(v.select("query_id", "variant", "changed").iter_rows(), scores):
            rows.append((name, var, q, ch, ndcg_at_k(cands[q][1], np.asarray(sc, dtype=float), k)))
    return pl.DataFrame(rows, schema={"retriever": pl.String, "variant": pl.String, "query_id": pl.String,
                                      "changed": pl.Boolean, "ndcg": pl.Float64}, orient="row")


MEM_COLUMNS = {"retriever": pl.String, "variant": pl.String, "n_queries": pl.Int64, "ndcg_original": pl.Float64,
               "ndcg_rewritten": pl.Float64, "mean_drop": pl.Float64, "lo": pl.Float64, "hi": pl.Float64,
               "control": pl.String, "control_drop": pl.Float64, "excess_drop": pl.Float64, "excess_lo": pl.Float64,
               "excess_hi": pl.Float64, "p_value": pl.Float64, "p_adjusted": pl.Float64, "flagged": pl.Boolean}


def _sign_flip(diffs: np.ndarray, n_perm: int, seed: int, retriever: str, variant: str) -> float:
    """The raw p-value of one test (module docstring): the one paired sign-flip test,
    :func:`saber_lib.metrics.resample.sign_flip_pvalues`, on one row of excess drops; its
    Monte-Carlo stream is named by the retriever and the variant."""
    return float(sign_flip_pvalues(diffs[None, :], [diffs.size], n_perm,
                                   rng_for(seed, "memorization", retriever, variant))[0])


def _drops(per_query) -> pl.DataFrame:
    """Per (retriever, variant incl. ``pooled``, changed query): ``ndcg_original, ndcg, drop``."""
    orig = per_query.filter(pl.col("variant") == "original").select("retriever", "query_id",
                                                                     pl.col("ndcg").alias("ndcg_original"))
    rw = per_query.filter((pl.col("variant") != "original") & pl.col("changed")).join(
        orig, on=["retriever", "query_id"], how="inner").with_columns(
        (pl.col("ndcg_original") - pl.col("ndcg")).alias("drop"))
    pooled = rw.group_by("retriever", "query_id", maintain_order=True).agg(
        pl.lit("pooled").alias("variant"), pl.col("ndcg_original").first(), pl.col("ndcg").mean(),
        pl.col("drop").mean())
    cols = ["retriever", "variant", "query_id", "ndcg_original", "ndcg", "drop"]
    return pl.concat([rw.select(cols), pooled.select(cols)])


def memorization_table(per_query, *, control: str = "bm25", n_perm: int = 10000, n_boot: int = 1000,
                       level: float = 0.95, seed: int = 0, alpha: float = 0.05) -> pl.DataFrame:
    """Per retriever and variant (plus ``pooled``), from :func:`evaluate_variants`' table (queries
    the variant did not change are left out): ``retriever, variant, n_queries, ndcg_original,
    ndcg_rewritten, mean_drop, lo, hi`` (the drop and its interval), ``control, control_drop``
    (the control's mean drop on the same queries), ``excess_drop, excess_lo, excess_hi``,
    ``p_value`` (raw, excess drop vs 0), ``p_adjusted`` (Holm over all tests), ``flagged``. The
    control's own rows are not tested (p-values null, never flagged)."""
    drops = _drops(per_query)
    names = sorted(set(per_query["retriever"].to_list()))
    if control not in names:
        raise ValueError(f"robustness.mem_control: the control retriever {control!r} is not among the probed "
                         f"retrievers ({', '.join(names)})")
    ctrl = drops.filter(pl.col("retriever") == control).select("variant", "query_id",
                                                                 pl.col("drop").alias("control_drop"))
    allrows = drops.join(ctrl, on=["variant", "query_id"], how="left")
    if allrows["control_drop"].null_count():
        raise ValueError(f"the control {control!r} has no nDCG for some rewritten queries")
    rows = []
    for (r, v), g in allrows.sort("retriever", "variant", "query_id").group_by(["retriever", "variant"],
                                                                               maintain_order=True):
        d, c = g["drop"].to_numpy(), g["control_drop"].to_numpy()
        m, lo, hi = bootstrap_ci(d, n_boot, level, seed)
        em, elo, ehi = bootstrap_ci(d - c, n_boot, level, seed)
        p = _sign_flip(d - c, n_perm, seed, r, v) if r != control else None
        rows.append([r, v, d.size, float(g["ndcg_original"].mean()), float(g["ndcg"].mean()), m, lo, hi, control,
                     float(c.mean()), em, elo, ehi, p, None, False])
    adjusted = holm([np.nan if row[13] is None else row[13] for row in rows])
    for row, pa in zip(rows, adjusted):
        if row[13] is not None:
            row[14] = float(pa)
            row[15] = bool(pa < alpha and row[10] > 0)
    return pl.DataFrame(rows, schema=MEM_COLUMNS, orient="row")


def flag_rule(table: pl.DataFrame, alpha: float) -> str:
    """The flag rule in words, for a caption: the control, the test and the size of Holm's family."""
    m = int(table["p_value"].is_not_null().sum()) if table.height else 0
    control = table["control"][0] if table.height else "-"
    return (f"control: {control} (cannot have seen the benchmark); excess drop = a retriever's drop minus the "
            f"control's on the same queries; p: two-sided paired sign-flip test of mean excess drop 0, Holm-adjusted "
            f"over {m} tests (retrievers but the control x variants, pooled included); flagged when the excess "
            f"drop is positive and the adjusted p < {alpha}")


def memorization_probe(retrievers, corpus, ratings, *, setting: str = "statement-full", k: int = 10,
                       rewriters: Mapping[str, Rewriter] | None = None, llm_backend=None, llm_retries: int = 1,
                       max_failure_rate: float | None = None, n_perm: int = 10000,
                       n_boot: int = 1000, level: float = 0.95, seed: int = 0, alpha: float = 0.05,
                       control: str = "bm25"):
    """Variants, per-query nDCG and the table in one call: returns ``(table, per_query, variants)``.
    ``control`` must be one of ``retrievers``."""
    names = list(retrievers) if isinstance(retrievers, Mapping) else [getattr(r, "name", "") for r in retrievers]
    if control not in names:
        raise ValueError(f"robustness.mem_control: the control retriever {control!r} is not among the probed "
                         f"retrievers ({', '.join(names)})")
    qids = ratings["query_id"].unique(maintain_order=True).to_list()
    variants = query_variants(corpus, qids, rewriters, llm_backend, llm_retries, max_failure_rate)
    per_q = evaluate_variants(retrievers, variants, corpus, ratings, setting=setting, k=k)
    table = memorization_table(per_q, control=control, n_perm=n_perm, n_boot=n_boot, level=level, seed=seed,
                               alpha=alpha)
    return table, per_q, variants


__all__ = ["query_variants", "evaluate_variants", "memorization_table", "memorization_probe",
           "flag_rule", "DEFAULT_VARIANTS"]
