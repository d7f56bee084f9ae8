"""The public tournament API at its documented import path (docs/public_api.md); the code lives in
:mod:`saber_lib.judging` (schedules, Bradley-Terry, the driver)."""
from .judging.bradley_terry import bt_objective, bt_posterior_var, fit_bradley_terry, rescale  # noqa: F401
from .judging.outcomes import OUTCOMES, comparisons_from_outcomes  # noqa: F401
from .judging.schedules import (SCHEDULES, Standing, adaptive_round, first_round, next_pairs,  # noqa: F401
                                random_round, round_robin_round, swiss_round)
from .judging.seeds import round_rng  # noqa: F401
from .core.seeds import stable_int  # noqa: F401
from .judging.tournament import (Doc, corpus_docs, plan_queries, ratings_from_judgments,  # noqa: F401
                                 run_tournament)
