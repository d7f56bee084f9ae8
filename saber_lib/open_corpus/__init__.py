"""Open-corpus track (beyond the paper, which reranks fixed candidate sets; docs/robustness.md): first-stage retrieval over the whole corpus, two-stage reranking,
duplicate exclusion, depth-k pooling and Hit@k / Recall@k / MRR@k / nDCG@10 with judged@k.

Entry point: :func:`run_open_corpus`. Pieces: :mod:`.texts` (what is indexed), the whole-corpus
indexes of the retrievers (``saber_lib.retrieval.indexes``, ``.index_cache``, ``.corpus``),
:mod:`.exclusion`, :mod:`.pooling`, :mod:`.metrics`, :mod:`.rerank`; pooled judging and the grown
qrels in :mod:`.pooled`. The stage's recipes around the entry point (inputs, pooled judging
with the profile's judge, tables, figure) are in :mod:`.stage`.
"""
from .exclusion import duplicate_groups, exclusions
from ..metrics.ranking import hit_at_k, judged_at_k, ndcg_open, per_query_metrics, recall_at_k, rr_at_k
from .pooled import PoolJudging, grow_qrels, judge_pool, round_budget, score_runs
from .pooling import pool_budget, pool_to_judge
from .rerank import LLMPointwiseReranker, rerank
from .texts import REPRESENTATIONS, corpus_hash, representation_texts, summary_frame
from .track import OpenCorpusResult, parse_system, run_open_corpus, summarize_metrics

__all__ = [
    "LLMPointwiseReranker", "OpenCorpusResult",
    "PoolJudging", "grow_qrels", "judge_pool", "round_budget", "score_runs",
    "REPRESENTATIONS", "corpus_hash", "duplicate_groups", "exclusions",
    "hit_at_k", "judged_at_k", "ndcg_open", "parse_system", "per_query_metrics", "pool_budget",
    "pool_to_judge", "recall_at_k", "representation_texts", "rerank", "rr_at_k", "run_open_corpus",
    "summarize_metrics", "summary_frame",
]
