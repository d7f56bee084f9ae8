"""Corpus stage (paper 3.1, App. A; SPEC section 1): sources -> normalized records -> dedup.

``build_corpus(data_dir, params) -> CorpusResult`` loads the sources of ``corpus.sources`` (one
registered loader each, :mod:`.loaders`), quarantines unusable records, removes exact duplicates
within a source and MinHash-LSH near duplicates across sources (:mod:`.dedup`), and reports the
counts; ``write_outputs(result, dir)`` writes corpus.parquet, quarantine.parquet,
dedup_log.parquet and report.json. The files each source reads: ``loaders.FILES``.

May import: ``config``, ``data``.
"""
from .build import DEDUP_BACKEND, CorpusResult, build_corpus, make_report, write_outputs
from .loaders import FILES, LOADERS, load_source, register
from .readers import SourceLoad

__all__ = ["build_corpus", "CorpusResult", "write_outputs", "make_report", "DEDUP_BACKEND",
           "LOADERS", "FILES", "SourceLoad", "load_source", "register"]
