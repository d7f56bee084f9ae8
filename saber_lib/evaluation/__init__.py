"""Metric kernels, apart from the tables that report them: nDCG@k (:mod:`.ndcg`), the resampler
(:mod:`.resample`: query bootstrap, two-level, paired tests), the one seed helper (:mod:`.seeds`) and
the comparison of system orders under other relevance scales and gains (:mod:`.rescaling`).

Plain numpy in, numpy out; no frames, no stage knowledge. May import: nothing of ``saber_lib``.
"""
