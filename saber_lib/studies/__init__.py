"""The paper's studies (paper 4.2-4.4, App. C): inversions, signal ablation, math vs words, judge validation,
distributions.

Modules: :mod:`.inversions` (inversions vs rounds per schedule), :mod:`.ablation` (cumulative rank
per candidate group), :mod:`.latex_split` (math delimiter lexer), :mod:`.math_words` (math-only vs
words-only queries), :mod:`.distributions` (domain and subdomain weights, pie charts). Judge validation
(agreement, reference labels, grades, fidelity) lives in :mod:`saber_lib.validation`.

May import every layer below it (``judging``, ``retrievers``, ``evaluate``, ...), never ``pipeline``.
"""
from .ablation import final_ranks, group_rank_counts, pooled_curves, signal_ablation  # noqa: F401
from .distributions import category_weights, problem_categories  # noqa: F401
from .latex_split import math_only, normalize_delimiters, split_math, words_only  # noqa: F401

__all__ = ["final_ranks", "group_rank_counts", "pooled_curves", "signal_ablation",
           "category_weights", "problem_categories", "math_only",
           "normalize_delimiters", "split_math", "words_only"]
