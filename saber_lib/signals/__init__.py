"""Pair signals (paper 3.2.2-3.4) and the thresholds on them.

* :mod:`.topic` - topic similarity (information content, Lin, BMA, batched BMA)
* :mod:`.summary` - summary similarity (Jaccard; the tokenizer is :mod:`saber_lib.core.text`)
* :mod:`.store` - the ``signals/`` file format: reader, writers, histogram binning
* :mod:`.pairs` - the all-pairs kernel in tiles, :mod:`.stage` the ``signals`` stage; the executors of
  :mod:`saber_lib.core.parallel` run its tasks (serial, local process pool, Dask); :mod:`.reference` is the plain double loop it is checked against
* :mod:`.cost` - the stage's CPU estimated from a sample of its blocks (a cost model of their work)
* :mod:`.thresholds` - threshold sweeps and rules (the ``thresholds`` stage)
* :mod:`.rows` - usable rows and their domains
* :mod:`.pair_values` - both signals of chosen (query, candidate) pairs, as the stage computes them

May import: ``config``, ``data``, ``text``, ``ontology``. Public API (docs/public_api.md), importable from here:
``lin_similarity``, ``bma``, ``summary_tokens``, ``jaccard``.
"""
from ..core.text import TOKEN_RE, stop_words, summary_tokens  # noqa: F401
from .store import SignalStore, bin_edges, float16_bin_lut, value_bins  # noqa: F401
from .summary import jaccard  # noqa: F401
from .topic import bma, lin_similarity  # noqa: F401
