"""Robustness of the evaluation (beyond the paper; docs/robustness.md): nDCG intervals under rating draws, judges tested for invariance,
retrievers tested for memorization, and judging that stops when the evaluation is stable.

Modules (each documents its definitions in its docstring):

* :mod:`.intervals` - the two-level nDCG bootstrap beside the query-only one with the split of the
  interval width into a judging and a query part, swap probabilities between retrievers.
* :mod:`.rewriters` - deterministic rewriters that keep the mathematics.
* :mod:`.invariance` - an LLM paraphrase rewriter, and judge flip rates under each transformation
  (A/B order swap included).
* :mod:`.order_effect` - the first-shown advantage per judge (the fit:
  :func:`saber_lib.judging.bradley_terry.fit_order_effect`); Cohen's kappa and Krippendorff's alpha
  between judges.
* :mod:`.memorization` - nDCG@k of retrievers on original and rewritten queries, each retriever's
  drop against a control retriever's, the paired sign-flip test with Holm's adjustment, bootstrap
  intervals and flags.
* :mod:`.stage` - the robustness stage's sections (what ``15_robustness`` computes), from the
  stage's parameters and this run's artifacts.
* :mod:`.stopping` - a Swiss-round driver that stops judging a query once the nDCG@k of the
  evaluated retrievers is settled under rating draws, or no longer narrows.
* :mod:`.simulate` - synthetic benchmarks with a Bradley-Terry judge, for tests and benchmarks.

Inputs are the workbench's tables (``tournament/judgments.parquet``, ``tournament/ratings.parquet``,
``evaluate/scores.parquet``) as polars frames, judges as callables or objects with
``judge_pairs``, retrievers as objects with ``score``/``score_many``.
"""
