"""Where a rephrased copy of the query's own problem ranks (the authors' deduplication analysis).

For each query q a rephrasing q' of its own problem (and solution, rewritten as one group) is made:
by the LLM paraphraser when an LLM backend is set, otherwise by the deterministic rewriters of
:mod:`saber_lib.robustness.rewriters` applied one after the other (the ``rewriter`` column names
which). q' is then put, as a document in the candidate representation of the setting
(``rr_setting``; the authors: statement-statement), into two pools and ranked by its score for q
(the query side of the setting):

* ``candidates``: q's own candidate list plus q' (K + 1 documents), scored by a retriever of
  :func:`saber_lib.retrieval.get_retriever` fitted per query as in the evaluation (the authors'
  "one copy inserted");
* ``candidates_all``: q's candidates plus the copies of every query (K + n documents), q' ranked
  against all of them (the authors' "all copies inserted": a near-duplicate of another query
  competes too);
* ``corpus``: the whole corpus, through the retrievers' whole-corpus indexes (``bm25``, ``tfidf``: one
  index over every corpus document plus every query's copy; an encoder name: exact cosine). q' is
  ranked against the corpus documents only: q's own document (the original, which would trivially
  come first) and the other queries' copies are left out. Near-duplicates of q that the corpus
  holds under other ids stay in (a real competitor for a deduplicator).

Rank 1 is best. **Tie rule**: mid-rank, ``rank = 1 + #{d : s(d) > s(q')} + #{d : s(d) = s(q')} / 2``
over the other documents d of the pool; a copy tied with another document is therefore never at
rank 1. A query whose rewriter left its text unchanged is left out (an identical copy is no test)
and counted. Per (retriever, pool), the authors' readings (docs/robustness.md): ``n_queries``,
``mean_rank``, ``median_rank``, ``trimmed_mean_95`` (the mean of the ranks at or below their 95th
percentile: the worst 5% left out, ties at the cut kept), ``p90_rank`` / ``p99_rank`` (percentiles,
linear interpolation as ``numpy.percentile``), ``max_rank``, and ``top1``, ``top2``, ``top4``, ...,
``top128`` (shares of queries with rank <= k), with ``top10`` kept beside them.
"""
from __future__ import annotations

import time
from typing import Mapping, Sequence

import numpy as np
import polars as pl

from ..retrieval.base import score_lists
from ..retrieval.corpus import corpus_scores
from ..retrieval.registry import fixed_scores, get_retriever
from ..core.text import setting_texts
from ..leaderboard.rephrased import across_retrievers
from .memorization import query_variants
from .rewriters import Rewriter, default_rewriters

TOP_K = (1, 2, 4, 8, 16, 32, 64, 128)
SUMMARY = {"retriever": pl.String, "pool": pl.String, "rewriter": pl.String, "n_queries": pl.Int64,
           "mean_rank": pl.Float64, "median_rank": pl.Float64, "top1": pl.Float64, "top10": pl.Float64,
           "trimmed_mean_95": pl.Float64, "p90_rank": pl.Float64, "p99_rank": pl.Float64, "max_rank": pl.Float64,
           **{f"top{k}": pl.Float64 for k in TOP_K if k != 1}}
PER_QUERY = {"retriever": pl.String, "pool": pl.String, "rewriter": pl.String, "query_id": pl.String,
             "rank": pl.Float64, "pool_size": pl.Int64}
QUALITY_RESAMPLES = 10_000   # resamples of the retrievers for the interval of the rank-quality correlation


class Chain(Rewriter):
    """Several rewriters applied one after the other (each to the whole group)."""

    def __init__(self, rewriters: Sequence[Rewriter]):
        self.parts = list(rewriters)
        self.name = "+".join(r.name for r in self.parts)

    def rewrite_group(self, texts):
        out = list(texts)
        for r in self.parts:
            out = r.rewrite_group(out)
        return out


def mid_rank(copy_score: float, others: np.ndarray) -> float:
    """Rank of a document scoring ``copy_score`` among documents scoring ``others`` (1 = best;
    ties share the mean of their positions)."""
    others = np.asarray(others, dtype=np.float64)
    return 1.0 + float(np.sum(others > copy_score)) + float(np.sum(others == copy_score)) / 2.0


def rephrasings(corpus: pl.DataFrame, query_ids: Sequence[str], rewriter: Rewriter | None = None,
                llm_backend=None, llm_retries: int = 1, max_failure_rate: float | None = None) -> tuple[pl.DataFrame, str]:
    """(``query_id, problem, solution, changed`` of each query's copy, the rewriter's name): the LLM
    paraphrase when ``llm_backend`` is given, else ``rewriter`` (through
    :func:`saber_lib.robustness.memorization.query_variants`, so LLM calls share its cache)."""
    if llm_backend is None and rewriter is None:
        raise ValueError("a rephrasing needs an LLM backend or a rewriter")
    rws = {} if llm_backend is not None else {rewriter.name: rewriter}
    v = query_variants(corpus, list(query_ids), rws, llm_backend=llm_backend, llm_retries=llm_retries,
                       max_failure_rate=max_failure_rate).filter(pl.col("variant") != "original")
    return v.drop("variant"), v["variant"][0] if v.height else (rewriter.name if rewriter else "llm_paraphrase")


def candidate_ranks(retrievers: Mapping, copies: pl.DataFrame, corpus: pl.DataFrame, benchmark: pl.DataFrame,
                    setting: str, all_copies: bool = False) -> pl.DataFrame:
    """Per retriever and changed query: the copy's mid-rank among the query's candidates + the copy
    (pool ``candidates``), or with ``all_copies`` among the candidates + every changed query's copy
    (pool ``candidates_all``). ``benchmark``: ``query_id, cand_id, position``; :data:`PER_QUERY` rows."""
    texts = {d: (p, s) for d, p, s in corpus.select("doc_id", "problem", "solution").iter_rows()}
    ch = copies.filter(pl.col("changed"))
    cands = {q: g.sort("position")["cand_id"].to_list()
             for (q,), g in benchmark.filter(pl.col("query_id").is_in(ch["query_id"].to_list()))
             .group_by(["query_id"], maintain_order=True)}
    qids = [q for q in ch["query_id"].to_list() if q in cands]
    copy_of = {q: (p, s) for q, p, s in ch.select("query_id", "problem", "solution").iter_rows()}
    qtexts = [setting_texts(setting, *texts[q])[0] for q in qids]
    copy_text = {q: setting_texts(setting, *copy_of[q])[1] for q in qids}
    others = {q: [o for o in qids if o != q] if all_copies else [] for q in qids}   # the other copies, after q's
    lists = [[setting_texts(setting, *texts[c])[1] for c in cands[q]] + [copy_text[q]] + [copy_text[o] for o in others[q]]
             for q in qids]
    ids = [cands[q] + [f"{q}#copy"] + [f"{o}#copy" for o in others[q]] for q in qids]
    pool = "candidates_all" if all_copies else "candidates"
    rows = []
    for name, ret in retrievers.items():
        scores = score_lists(ret, qtexts, lists, query_ids=qids, candidate_ids=ids)
        for q, s in zip(qids, scores):
            at = len(cands[q])   # the query's own copy
            rows.append((name, pool, q, mid_rank(s[at], np.delete(s, at)), len(s)))
    return pl.DataFrame(rows, schema={k: v for k, v in PER_QUERY.items() if k != "rewriter"}, orient="row")


def corpus_ranks(systems: Sequence[str], copies: pl.DataFrame, corpus: pl.DataFrame, setting: str, *,
                 store=None, cache_dir=None, max_chunks=None, k1: float = 1.5, b: float = 0.75,
                 batch_size: int = 32) -> pl.DataFrame:
    """Per system and changed query: the copy's mid-rank among every corpus document but the query's
    own (the other copies are indexed, not ranked against). :data:`PER_QUERY` rows (pool ``corpus``)."""
    ch = copies.filter(pl.col("changed"))
    doc_ids = corpus["doc_id"].to_list()
    doc_texts = [setting_texts(setting, p, s)[1] for p, s in corpus.select("problem", "solution").iter_rows()]
    by_id = dict(zip(doc_ids, corpus.select("problem", "solution").iter_rows()))
    qids = ch["query_id"].to_list()
    missing = [q for q in qids if q not in by_id]
    if missing:
        raise KeyError(f"{len(missing)} queries are not corpus documents, e.g. {missing[:3]}")
    copy_texts = [setting_texts(setting, p, s)[1] for p, s in ch.select("problem", "solution").iter_rows()]
    qtexts = [setting_texts(setting, *by_id[q])[0] for q in qids]
    ids, texts = doc_ids + [f"{q}#copy" for q in qids], doc_texts + copy_texts
    n, pos = len(doc_ids), {d: i for i, d in enumerate(doc_ids)}
    rows = []
    for system in systems:
        score = corpus_scores(system, ids, texts, qtexts, store=store, cache_dir=cache_dir, max_chunks=max_chunks,
                               k1=k1, b=b, batch_size=batch_size)
        for i, q in enumerate(qids):
            s = score(i)
            keep = np.ones(n, dtype=bool)
            keep[pos[q]] = False
            rows.append((system, "corpus", q, mid_rank(s[n + i], s[:n][keep]), int(keep.sum()) + 1))
    return pl.DataFrame(rows, schema={k: v for k, v in PER_QUERY.items() if k != "rewriter"}, orient="row")


def rank_summary(per_query: pl.DataFrame) -> pl.DataFrame:
    """:data:`SUMMARY` rows per (retriever, pool, rewriter), in the order first seen."""
    if per_query.height == 0:
        return pl.DataFrame(schema=SUMMARY)
    return (per_query.group_by("retriever", "pool", "rewriter", maintain_order=True)
            .agg(pl.len().cast(pl.Int64).alias("n_queries"), pl.col("rank").mean().alias("mean_rank"),
                 pl.col("rank").median().alias("median_rank"), (pl.col("rank") <= 1).mean().alias("top1"),
                 (pl.col("rank") <= 10).mean().alias("top10"),
                 pl.col("rank").filter(pl.col("rank") <= pl.col("rank").quantile(0.95, "linear")).mean()
                 .alias("trimmed_mean_95"),
                 pl.col("rank").quantile(0.90, "linear").alias("p90_rank"),
                 pl.col("rank").quantile(0.99, "linear").alias("p99_rank"), pl.col("rank").max().alias("max_rank"),
                 *[(pl.col("rank") <= k).mean().alias(f"top{k}") for k in TOP_K if k != 1])
            .select(list(SUMMARY)))


def figure(per_query: pl.DataFrame):
    """Share of queries whose copy ranks at or above r (log r), one line per retriever, a panel per pool."""
    import matplotlib.pyplot as plt  # pyplot only once saber_lib.plots has chosen the backend
    import seaborn as sns  # figures only

    pools = [p for p in ("candidates", "candidates_all", "corpus") if p in set(per_query["pool"].to_list())]
    names = per_query["retriever"].unique(maintain_order=True).to_list()
    palette = dict(zip(names, sns.color_palette("husl", len(names))))   # one colour per retriever in every panel
    fig, axes = plt.subplots(1, max(1, len(pools)), figsize=(5.2 * max(1, len(pools)), 3.6), squeeze=False)
    for ax, pool in zip(axes[0], pools):
        d = per_query.filter(pl.col("pool") == pool).to_pandas()
        sns.ecdfplot(data=d, x="rank", hue="retriever", ax=ax, log_scale=True, palette=palette)
        sns.move_legend(ax, "lower right", fontsize=7, title=None, ncol=2)   # ECDFs leave that corner empty
        size = int(d["pool_size"].max())
        ax.set_title(f"{pool} (up to {size:,} documents)", fontsize=9)
        ax.set_xlabel("rank of the rephrased copy (1 = first)")
        ax.set_ylabel("share of queries with rank <= r")
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- the stage's section
def section(params: Mapping, corpus: pl.DataFrame, bench: pl.DataFrame, ratings: pl.DataFrame, *, store=None,
            backend=None, tournament_judge: str = "") -> dict:
    """The robustness stage's section: ``table`` (:data:`SUMMARY`), ``per_query``, ``caption``,
    ``figure_caption`` and ``record`` (facts for the manifest). Keys: ``rr_retrievers`` (``[]``:
    ``evaluate.retrievers`` without TREC runs), ``rr_setting``, ``rr_rewriters``, ``rr_corpus_systems``,
    ``rr_corpus_max_queries`` (0 = every query)."""
    start = time.perf_counter()
    qids = sorted(ratings["query_id"].unique().to_list())
    names = [n for n in (params["rr_retrievers"] or params["retrievers"]) if not fixed_scores(n)]
    rets = {n: get_retriever(n, k1=params["bm25_k1"], b=params["bm25_b"], store=store, cache_dir=params["cache_dir"],
                             max_chunks=params["embed_max_chunks"] or None) for n in names}
    every = default_rewriters()
    unknown = [r for r in params["rr_rewriters"] if r not in every]
    if unknown:
        raise KeyError(f"robustness.rr_rewriters: unknown rewriter(s) {unknown}; known: {', '.join(every)}")
    chain = Chain([every[r] for r in params["rr_rewriters"]]) if params["rr_rewriters"] else None
    copies, rewriter = rephrasings(corpus, qids, chain, llm_backend=backend, llm_retries=params["mem_paraphrase_retries"],
                                   max_failure_rate=(params.get("llm") or {}).get("max_failure_rate") if backend else None)
    setting = params["rr_setting"]
    parts = [candidate_ranks(rets, copies, corpus, bench, setting),
             candidate_ranks(rets, copies, corpus, bench, setting, all_copies=True)]
    cap = int(params["rr_corpus_max_queries"] or 0)
    corpus_q = sorted(copies.filter(pl.col("changed"))["query_id"].to_list())
    corpus_q = corpus_q[:cap] if cap else corpus_q
    if params["rr_corpus_systems"]:
        parts.append(corpus_ranks(params["rr_corpus_systems"], copies.filter(pl.col("query_id").is_in(corpus_q)),
                                  corpus, setting, store=store, cache_dir=params["cache_dir"],
                                  max_chunks=params["embed_max_chunks"] or None, k1=params["bm25_k1"],
                                  b=params["bm25_b"], batch_size=params["embed_batch_size"]))
    per_query = pl.concat(parts).with_columns(pl.lit(rewriter).alias("rewriter")).select(list(PER_QUERY))
    n_unchanged = copies.height - copies["changed"].sum()
    who = (f"LLM paraphrase ({backend.describe().get('model', '')})" if backend is not None
           else f"deterministic rewriters {rewriter} (no LLM backend)")
    n_cand = per_query.filter(pl.col("pool") == "candidates")["query_id"].n_unique()
    caption = (f"Rank of a rephrased copy of each query's own problem ({setting}; rephrased by {who}) among the "
               f"query's candidates plus the copy ({n_cand} queries; pool candidates), among the candidates plus every "
               f"query's copy (candidates_all) and among the whole corpus of {corpus.height:,} "
               f"documents without the query's own ({len(corpus_q) if params['rr_corpus_systems'] else 0} queries"
               + (f", the first {cap} by id: a subset" if cap and cap < len(copies) else "") + "); rank 1 = first; "
               f"ties share their mean position (mid-rank); topk: share of queries with rank <= k; trimmed_mean_95: mean "
               f"of the ranks at or below their 95th percentile; "
               f"{n_unchanged} quer{'y' if n_unchanged == 1 else 'ies'} the rewriter left unchanged left out; retrievers: "
               + ", ".join(f"{k}={r.backend}" for k, r in rets.items())
               + (f"; corpus: {', '.join(params['rr_corpus_systems'])} (open-corpus indexes)" if params["rr_corpus_systems"] else "")
               + f"; benchmark judged by {tournament_judge}.")
    return {"table": rank_summary(per_query), "per_query": per_query, "caption": caption,
            "figure_caption": "Share of queries whose rephrased copy ranks at or above r. " + caption,
            "record": {"rephrased_rewriter": rewriter, "rephrased_unchanged": int(n_unchanged)},
            "seconds": time.perf_counter() - start}


def run(ctx, params: Mapping, corpus: pl.DataFrame, bench: pl.DataFrame, ratings: pl.DataFrame, *, store=None,
        backend=None, backends: str = "") -> pl.DataFrame:
    """:func:`section` on the stage's context ``ctx``: writes ``rephrased_rank.parquet``,
    ``rephrased_rank_per_query.parquet`` and ``rephrased_rank_vs_ndcg.parquet`` (the readings against
    the retrievers' nDCG, :func:`saber_lib.leaderboard.rephrased.across_retrievers`), records the facts
    and the seconds, saves the tables and the figure (``backends``: the upstream line for its
    metadata); returns the table to show."""
    judge = ctx.upstream_info("tournament").get("judge", "not recorded")
    rr = section(params, corpus, bench, ratings, store=store, backend=backend, tournament_judge=judge)
    rr["table"].write_parquet(ctx.path("rephrased_rank.parquet"))
    rr["per_query"].write_parquet(ctx.path("rephrased_rank_per_query.parquet"))
    ctx.record(**rr["record"], rephrased_rank_seconds=round(rr["seconds"], 1))
    ctx.save_table(rr["table"], "robustness_rephrased_rank", caption=rr["caption"])
    # the readings against quality across this run's retrievers (the leaderboard's statistic)
    vs = across_retrievers(rr["table"], pl.read_parquet(ctx.input("evaluate", "ndcg.parquet")), QUALITY_RESAMPLES,
                           params["seed"])
    vs.write_parquet(ctx.path("rephrased_rank_vs_ndcg.parquet"))
    ctx.save_table(vs.drop("systems", "n_resamples"), "robustness_rephrased_rank_vs_ndcg", caption=(
        f"Spearman's rho across this run's retrievers between a reading of the rephrased copy's rank and their mean "
        f"nDCG per setting (retrievers both stages scored; mean_rank, median_rank: lower is better), with a 95% "
        f"interval over {QUALITY_RESAMPLES} resamples of the retrievers (seed {params['seed']}; NaN under 3 "
        f"retrievers). " + rr["caption"]))
    ctx.save_figure(figure(rr["per_query"]), "robustness_rephrased_rank", caption=rr["figure_caption"],
                    backends=backends)
    return rr["table"]
