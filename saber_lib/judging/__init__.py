"""Relevance judging (paper 3.5, App. B.4): who is closer to the query, and the ratings.

* :mod:`.outcomes` - the one judgment-outcome type and its conversions (table labels, weighted
  Bradley-Terry comparisons, int8 codes)
* :mod:`.seeds` - stable seeds and per-round generators
* :mod:`.schedules` - swiss / random / exhaustive / adaptive pairings
* :mod:`.bradley_terry` - the penalized Bradley-Terry objective, the one fit (one weighting of the
  comparisons or many at once), the fit with a first-shown advantage, the rescaling
* :mod:`.draws` - rating draws (the judgments redrawn, Bradley-Terry refitted) and rating
  standard errors
* :mod:`.judges` - the judges behind one interface, :func:`.judges.judge_from_profile` and the
  fingerprint of a judge's prompt
* :mod:`.rounds` - the one round driver (schedule, order shown, one judged batch per round, a
  stopping hook) behind the tournament, the inversions study, stopping and the simulations
* :mod:`.tournament` - the driver: rounds, stored judgments, ratings, reports
* :mod:`.stage` - the tournament stage's tables, figures and captions

May import: ``core``, ``metrics``, ``report``, ``llm``, ``prompts``, ``embed``, ``signals``. Public API
(docs/public_api.md), importable from here: ``swiss_round``, ``fit_bradley_terry``, ``rescale``,
``weighted_comparisons``.
"""
from .bradley_terry import fit_bradley_terry, rescale  # noqa: F401
from .outcomes import weighted_comparisons  # noqa: F401
from .schedules import swiss_round  # noqa: F401

