"""Metric kernels, apart from the tables that report them: nDCG@k with its tie and zero-ideal
policies (:mod:`.ndcg`) and the resampler (:mod:`.resample`: query bootstrap, two-level, paired
tests), the comparison of system orders under other relevance scales and gains
(:mod:`.rescaling`), ranking metrics (:mod:`.ranking`), agreement statistics (:mod:`.agreement`) and
correlations across systems with an interval from resampling the systems (:mod:`.correlation`). The seed helper they draw with is :mod:`saber_lib.core.seeds`.

Plain numpy in, numpy out; no frames, no stage knowledge. May import: ``core``.
Public API (docs/public_api.md), importable from here: ``ndcg_at_k``.
"""
from .ndcg import ndcg_at_k  # noqa: F401
