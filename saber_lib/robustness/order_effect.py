"""Order effects and agreement between judges.

Bradley-Terry with a first-shown advantage
------------------------------------------
A judgment shows ``a`` first and ``b`` second. The model::

    P(a preferred) = sigmoid(theta_a - theta_b + gamma)

``gamma`` is the log-odds advantage of the first-shown candidate (0 for a position-blind judge;
``sigmoid(gamma)`` is the chance the first of two equal candidates wins). It is fitted jointly with
the strengths of every (query, candidate) by penalized maximum likelihood with the convention of
:func:`saber_lib.judging.bradley_terry.fit_bradley_terry`: ``alpha * sum theta^2`` on the strengths, no
penalty on ``gamma``; a tie counts half a win each way; failures are left out::

    min  alpha * sum theta^2 + sum_k [ y_k softplus(-d_k) + (1 - y_k) softplus(d_k) ],
         d_k = theta_{a_k} - theta_{b_k} + gamma,   y_k = 1 (a), 0 (b), 1/2 (tie)

The fit is :func:`saber_lib.judging.bradley_terry.fit_order_effect`, on the one Bradley-Terry
objective. ``gamma`` is identified best when pairs are judged in both orders (the
table reports how many are); its standard error is the Laplace approximation
``sqrt([H^-1]_{gamma gamma})``.

Agreement between judges
------------------------
A unit is (query, unordered pair); a judge's label on it is which of the two won (named by the
sorted ids, so the order shown does not matter) or ``tie``; several verdicts of one judge on the
same unit that disagree make a ``tie``; failures are missing. :func:`cohen_kappa` on two judges'
labels (units both labelled), :func:`krippendorff_alpha` (nominal, the ``krippendorff`` package)
over all judges with missing values allowed.
"""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np
import polars as pl
from scipy.special import expit

from ..judging.bradley_terry import fit_order_effect
from ..judging.outcomes import codes_of_labels, first_score
from ..metrics.agreement import cohen_kappa, krippendorff_alpha


def order_effect_table(judgments, alpha: float = 0.5, by: str = "judge") -> pl.DataFrame:
    """The order-effect fit per judge (or per value of column ``by``; None: one fit of all).

    Columns: ``judge, n_judgments, pairs_both_orders, first_shown_win_rate`` (raw share of decided
    judgments won by the first-shown candidate), ``gamma, gamma_se, p_first_equal``
    (``sigmoid(gamma)``), ``gamma_lo, gamma_hi`` (gamma +- 1.96 se), ``converged``."""
    ok = judgments.filter(pl.col("outcome") != "failure")
    groups = [("all", ok)] if by is None else [(k[0], g) for k, g in ok.group_by([by], maintain_order=True)]
    rows = []
    for name, g in groups:
        keys = pl.concat([g.select("query_id", pl.col("a").alias("c")), g.select("query_id", pl.col("b").alias("c"))]) \
            .unique(maintain_order=True)
        index = {(q, c): i for i, (q, c) in enumerate(keys.iter_rows())}
        first = np.array([index[(q, a)] for q, a in g.select("query_id", "a").iter_rows()], dtype=np.int64)
        second = np.array([index[(q, b)] for q, b in g.select("query_id", "b").iter_rows()], dtype=np.int64)
        y = first_score(np.array(codes_of_labels(g["outcome"]), dtype=float))
        fit = fit_order_effect(len(index), first, second, y, alpha=alpha)
        shown = g.select("query_id", "a", "b").with_columns(
            pl.min_horizontal("a", "b").alias("lo"), pl.max_horizontal("a", "b").alias("hi"),
            (pl.col("a") < pl.col("b")).alias("lo_first"))
        both = shown.group_by("query_id", "lo", "hi").agg(pl.col("lo_first").n_unique().alias("k")) \
            .filter(pl.col("k") == 2).height
        decided = y != 0.5
        fsw = float(np.mean(y[decided])) if decided.any() else math.nan
        rows.append((str(name), fit.n_judgments, both, fsw, fit.gamma, fit.gamma_se, float(expit(fit.gamma)),
                     fit.gamma - 1.96 * fit.gamma_se, fit.gamma + 1.96 * fit.gamma_se, fit.converged))
    return pl.DataFrame(rows, schema={"judge": pl.String, "n_judgments": pl.Int64, "pairs_both_orders": pl.Int64,
                                      "first_shown_win_rate": pl.Float64, "gamma": pl.Float64,
                                      "gamma_se": pl.Float64, "p_first_equal": pl.Float64,
                                      "gamma_lo": pl.Float64, "gamma_hi": pl.Float64, "converged": pl.Boolean},
                        orient="row")


# ============================================================================ agreement
def unit_labels(judgments_by_judge: Mapping[str, pl.DataFrame]) -> pl.DataFrame:
    """One row per unit (``query_id, lo, hi``: the unordered pair, ids sorted) and one column per
    judge with its label ``lo`` | ``hi`` | ``tie`` (null where it did not judge the pair or failed)."""
    out = None
    for name, j in judgments_by_judge.items():
        g = j.filter(pl.col("outcome") != "failure").with_columns(
            pl.min_horizontal("a", "b").alias("lo"), pl.max_horizontal("a", "b").alias("hi"))
        g = g.with_columns(
            pl.when(pl.col("outcome") == "tie").then(pl.lit("tie"))
            .when((pl.col("outcome") == "a") == (pl.col("a") == pl.col("lo"))).then(pl.lit("lo"))
            .otherwise(pl.lit("hi")).alias("lab"))
        g = g.group_by("query_id", "lo", "hi", maintain_order=True).agg(pl.col("lab").unique().alias("labs")) \
            .select("query_id", "lo", "hi",
                    pl.when(pl.col("labs").list.len() == 1).then(pl.col("labs").list.first())
                    .otherwise(pl.lit("tie")).alias(name))
        out = g if out is None else out.join(g, on=["query_id", "lo", "hi"], how="full", coalesce=True)
    return out if out is not None else pl.DataFrame()


def judge_agreement_table(judgments_by_judge: Mapping[str, pl.DataFrame]) -> tuple[pl.DataFrame, float]:
    """Pairwise Cohen's kappa between judges (``judge_1, judge_2, units, raw_agreement, kappa``)
    and Krippendorff's alpha over all judges, on the units of :func:`unit_labels`."""
    lab = unit_labels(judgments_by_judge)
    names = list(judgments_by_judge)
    rows = []
    for i in range(len(names)):
        for j in range(i + 1, len(names)):
            x, y = lab[names[i]].to_list(), lab[names[j]].to_list()
            both = [(a, b) for a, b in zip(x, y) if a is not None and b is not None]
            raw = float(np.mean([a == b for a, b in both])) if both else math.nan
            rows.append((names[i], names[j], len(both), raw, cohen_kappa(x, y)))
    kap = pl.DataFrame(rows, schema={"judge_1": pl.String, "judge_2": pl.String, "units": pl.Int64,
                                     "raw_agreement": pl.Float64, "kappa": pl.Float64}, orient="row")
    alpha = krippendorff_alpha([lab[n].to_list() for n in names]) if len(names) >= 2 and lab.height else math.nan
    return kap, alpha
