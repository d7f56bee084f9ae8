"""Leaderboard of retrievers on SABER-Math as released: the authors' published per-query results
beside runs of this workbench, with bootstrap intervals and paired significance tests.

Modules:

- :mod:`.published`: read and write the authors' result layout (``evaluation/<model>__p<k>.json``,
  ``confidence/<model>.json``) and read a workbench run's ``evaluate/ndcg.parquet``.
- :mod:`.stats`: bootstrap intervals (``correct`` and ``authors`` schemes), the paired sign-flip
  test, Holm's adjustment, paired bootstrap intervals of differences, compact letter display.
- exact expected, minimum and maximum nDCG@k over the orders of tied candidates: :mod:`saber_lib.metrics.ndcg`.
- :mod:`.report`: the leaderboard and pairwise tables, Markdown/LaTeX, forest plot, heat map.
- :mod:`.mteb`: MTEB leaderboard rows matched to systems by the committed ``systems.csv``, and the
  correlation of MTEB with SABER-Math across systems; :mod:`.rephrased`: the rephrased-copy rank
  against nDCG@10 across systems; :mod:`.crosssystem`: both written beside the leaderboard.
- :mod:`.cli`: ``saber leaderboard ...`` (``main(argv)``).
- :mod:`.stage`: the leaderboard stage's recipes (which runs join, provenance, manifest facts, contributions).

This package depends on nothing in ``saber_lib`` but :mod:`saber_lib.core` (the domain list, strict
JSON, command output folders, seeds), :mod:`saber_lib.metrics` (the resampler, correlations),
:mod:`saber_lib.report` (the table and figure writers) and the lexical name map of
:mod:`saber_lib.evaluate.lexical`.
"""
