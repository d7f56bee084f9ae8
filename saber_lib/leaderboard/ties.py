"""nDCG@k when the retriever's scores tie: exact expectation, minimum and maximum over tie orders.

The functions live in :mod:`saber_lib.evaluate.tables` (the evaluate stage's ``tie_policy`` uses them);
re-exported here for the leaderboard's users.
"""
from __future__ import annotations

from ..metrics.ndcg import expected_ndcg_at_k, ndcg_tie_range, tie_sensitivity  # noqa: F401  (re-exported)
