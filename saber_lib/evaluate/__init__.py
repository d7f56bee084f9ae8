"""The evaluate stage (paper 4.1, App. C.3-C.4): retrievers (:mod:`.retrievers`), the evaluation
tables over the :mod:`saber_lib.metrics` kernels (:mod:`.tables`), the BEIR export and TREC run
import (:mod:`.export`), and the stage's recipes: which benchmark it reads, scoring, captions
(:mod:`.stage`).

May import every layer below it (``core``, ``metrics``, ``report``, ``embed``, ``judging``, ...).
"""
