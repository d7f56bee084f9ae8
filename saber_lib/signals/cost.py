"""The all-pairs stage's CPU estimated from a sample of its blocks (``benchmarks/bench_scale.py``).

A block of the stage (a run of query rows against all candidates) costs about
``alpha x pairs + beta x evaluations`` CPU seconds, where ``evaluations`` is the block's
sum of ``|X_q| x |X_c|`` (:meth:`PairInputs.block_work`): the histogram, Jaccard and storage work
grows with the pairs, the BMA work with the topic-pair evaluations. On top of that, the first block a
worker runs pays a one-off warm-up (its heap grows to the tile sizes: page faults, system time),
whatever the number of blocks it runs after it.

Two estimators of the CPU of all blocks from the CPU of a random sample of them:

* :func:`row_scaled_total`: the sampled CPU times all rows over the sampled rows. Every row is
  taken to cost the same and the warm-ups are scaled with the rest: with few blocks per worker
  (a small sample of a large N) the estimate overshoots.
* :func:`cost_model_total`: ``alpha`` and ``beta`` fitted (least squares, not negative) on the
  sampled blocks that were not a worker's first, every block of the full run predicted from its
  own work, and each sampled worker's warm-up (its first block's CPU above the model) added once,
  as a full run on as many workers pays it once per worker. It is exact when the costs follow the
  model, whatever the sample.
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import nnls


def row_scaled_total(rows_sample, cpu_sample, rows_total: float) -> float:
    """Sampled CPU scaled by the rows: ``sum(cpu) x rows_total / sum(rows)``."""
    rows = np.asarray(rows_sample, dtype=np.float64)
    return float(np.sum(cpu_sample) * rows_total / rows.sum())


def cost_model_total(work_sample, cpu_sample, work_all, first=None) -> float:
    """CPU of all blocks from a sample of them (module docstring).

    ``work_sample``: ``(k, m)`` per sampled block, the ``m`` quantities its cost grows with (pairs,
    topic-pair evaluations); ``cpu_sample``: their CPU seconds; ``work_all``: ``(n_blocks, m)`` the
    same quantities for every block of the full run; ``first``: per sampled block, whether it was
    the first its worker ran (its excess over the model is counted once, not scaled).
    """
    x = np.atleast_2d(np.asarray(work_sample, dtype=np.float64))
    y = np.asarray(cpu_sample, dtype=np.float64)
    x_all = np.atleast_2d(np.asarray(work_all, dtype=np.float64))
    if x.shape[0] != len(y) or x.shape[1] != x_all.shape[1]:
        raise ValueError(f"work_sample {x.shape}, cpu_sample {y.shape} and work_all {x_all.shape} do not agree")
    first = np.zeros(len(y), bool) if first is None else np.asarray(first, bool)
    steady = ~first if (~first).sum() >= x.shape[1] else np.ones(len(y), bool)
    scale = np.where(x_all.mean(axis=0) > 0, x_all.mean(axis=0), 1.0)   # columns of comparable size
    coef, _ = nnls(x[steady] / scale, y[steady])
    warmup = np.clip(y[first] - (x[first] / scale) @ coef, 0.0, None).sum()
    return float((x_all / scale).sum(axis=0) @ coef + warmup)
