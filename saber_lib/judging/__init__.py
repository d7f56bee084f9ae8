"""Relevance judging (paper 3.5, App. B.4): who is closer to the query, and the ratings.

* :mod:`.outcomes` - the one judgment-outcome type and its conversions (table labels, weighted
  Bradley-Terry comparisons, int8 codes)
* :mod:`.seeds` - stable seeds and per-round generators
* :mod:`.schedules` - swiss / random / exhaustive / adaptive pairings
* :mod:`.bradley_terry` - the penalized Bradley-Terry objective, the one fit (one weighting of the
  comparisons or many at once), the fit with a first-shown advantage, the rescaling
* :mod:`.draws` - rating draws (the judgments redrawn, Bradley-Terry refitted) and rating
  standard errors
* :mod:`.judge_base` - the interface every judge implements (:class:`Judge`)
* :mod:`.judges` - the LLM, ordinal, proxy judges and the position-swap and majority combinators,
  and the fingerprint of a judge's prompt
* :mod:`.registry` - the one registry of judges by spec (``llm``, ``proxy:<encoder>``,
  ``blend:A+B``, ...): the parser, :func:`register_judge`, :func:`build_judge`, the profile's judge
  settings, and the profile check of every judge-valued key
* :mod:`.retriever_judge` - ``retriever:<name>``, a registered retriever as a judge (judge studies).
* :mod:`.spec_judges` - the built-in kinds, the judges only a spec names (first, signal, blend),
  :func:`.spec_judges.judge_from_profile` (the judge that rates the benchmark) and the answers of a
  judge with its margins
* :mod:`.rounds` - the one round driver (schedule, order shown, one judged batch per round, a
  stopping hook) behind the tournament, the inversions study, stopping and the simulations
* :mod:`.tournament` - the driver: rounds, stored judgments, ratings, reports
* :mod:`.stage` - the tournament stage's tables, figures and captions

May import: ``core``, ``metrics``, ``report``, ``llm``, ``prompts``, ``embed``, ``signals``, ``retrieval``. Public API
(docs/public_api.md), importable from here: ``swiss_round``, ``fit_bradley_terry``, ``rescale``,
``weighted_comparisons``; for a judge of one's own: ``Judge``, ``register_judge``, ``build_judge``.
"""
from .bradley_terry import fit_bradley_terry, rescale  # noqa: F401
from .outcomes import weighted_comparisons  # noqa: F401
from .schedules import swiss_round  # noqa: F401

from .judge_base import Judge  # noqa: F401
from .registry import build_judge, register_judge  # noqa: F401
from . import spec_judges  # noqa: F401  (registers the built-in judge kinds)
from . import retriever_judge  # noqa: F401  (registers retriever:<name>)
