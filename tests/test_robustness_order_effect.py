import itertools
import math

import numpy as np
import polars as pl
import pytest

from saber_lib.robustness.order_effect import judge_agreement_table, order_effect_table, unit_labels
from saber_lib.metrics.agreement import cohen_kappa, krippendorff_alpha
from saber_lib.judging.bradley_terry import fit_order_effect
from saber_lib.judging.bradley_terry import fit_bradley_terry


def _both_orders(gamma, n_queries=40, n_cands=10, seed=0, judge="j"):
    rng = np.random.default_rng(seed)
    rows = []
    for q in range(n_queries):
        s = rng.standard_normal(n_cands)
        for i, j in itertools.combinations(range(n_cands), 2):
            for a, b in ((i, j), (j, i)):
                p = 1 / (1 + math.exp(-(s[a] - s[b] + gamma)))
                rows.append((f"q{q}", 1, f"c{a}", f"c{b}", "a" if rng.random() < p else "b", judge, None))
    return pl.DataFrame(rows, schema=["query_id", "round", "a", "b", "outcome", "judge", "reason"], orient="row")


@pytest.mark.parametrize("gamma", [0.0, 0.8, -0.5])
def test_planted_order_bias_is_recovered(gamma):
    J = _both_orders(gamma, seed=int(10 * abs(gamma)) + 1)
    t = order_effect_table(J)
    row = t.row(0, named=True)
    assert row["pairs_both_orders"] == 40 * 45
    assert row["gamma"] == pytest.approx(gamma, abs=0.15)
    assert row["gamma_lo"] < gamma < row["gamma_hi"] or abs(row["gamma"] - gamma) < 3 * row["gamma_se"]
    assert 0.02 < row["gamma_se"] < 0.1 and row["converged"]


def test_without_order_term_data_the_fit_is_bradley_terry():
    # judgments balanced in order with no first-shown effect in the data: gamma = 0 exactly, strengths
    # equal those of the plain penalized Bradley-Terry fit
    first = [0, 1, 1, 2, 0, 2]
    second = [1, 0, 2, 1, 2, 0]
    y = [1, 0, 1, 0, 1, 0]  # 0 beats 1 (both orders), 1 beats 2, 0 beats 2
    fit = fit_order_effect(3, first, second, y)
    assert fit.gamma == pytest.approx(0.0, abs=1e-8)
    ref = fit_bradley_terry(3, [0, 0, 1, 1, 0, 0], [1, 1, 2, 2, 2, 2])
    np.testing.assert_allclose(fit.theta, ref, atol=1e-7)


def test_first_shown_always_wins_gives_a_large_positive_gamma():
    first = [0, 1, 1, 2, 0, 2]
    second = [1, 0, 2, 1, 2, 0]
    fit = fit_order_effect(3, first, second, [1, 1, 1, 1, 1, 1])
    assert fit.gamma > 3 and np.allclose(fit.theta, 0, atol=1e-6)


def test_cohen_kappa_by_hand():
    # p_o = 3/4; marginals x: (1/2, 1/2), y: (1/4, 3/4); p_e = 1/2; kappa = (3/4 - 1/2) / (1/2) = 1/2
    assert cohen_kappa([1, 1, 2, 2], [1, 2, 2, 2]) == pytest.approx(0.5)
    assert cohen_kappa(["a", "b", "a"], ["a", "b", "a"]) == pytest.approx(1.0)
    # units with a missing label are dropped
    assert cohen_kappa([1, 1, 2, 2, None], [1, 2, 2, 2, 1]) == pytest.approx(0.5)
    # p_o = 0 with p_e = 1/2 -> -1
    assert cohen_kappa([1, 2], [2, 1]) == pytest.approx(-1.0)


def test_krippendorff_alpha_by_hand():
    # coincidences: o11 = 2, o12 = o21 = 1, o22 = 4; n1 = 3, n2 = 5, n = 8
    # alpha = 1 - (n - 1) * (o12 + o21) / (2 n1 n2) = 1 - 7 * 2 / 30 = 8/15
    assert krippendorff_alpha([[1, 1, 2, 2], [1, 2, 2, 2]]) == pytest.approx(8 / 15)
    # a missing value drops that unit's pairable value (unit 4 has one value: not pairable)
    assert krippendorff_alpha([["x", "x", "y", "y"], ["x", "y", "y", None]]) == pytest.approx(
        1 - 5 * 2 / (3 * 3 * 2))


def test_unit_labels_and_agreement_ignore_the_order_shown():
    j1 = pl.DataFrame({"query_id": ["q", "q", "q"], "a": ["x", "y", "x"], "b": ["y", "z", "z"],
                       "outcome": ["a", "b", "tie"], "judge": "one"})
    # the same verdicts with the pairs shown the other way round, plus one failure
    j2 = pl.DataFrame({"query_id": ["q", "q", "q"], "a": ["y", "z", "z"], "b": ["x", "y", "x"],
                       "outcome": ["b", "a", "failure"], "judge": "two"})
    lab = unit_labels({"one": j1, "two": j2}).sort("lo", "hi")
    assert lab["one"].to_list() == ["lo", "tie", "hi"]  # x>y (lo wins); x~z; z>y (hi wins)
    assert lab["two"].to_list() == ["lo", None, "hi"]
    kap, alpha = judge_agreement_table({"one": j1, "two": j2})
    assert kap["units"][0] == 2 and kap["raw_agreement"][0] == 1.0 and kap["kappa"][0] == pytest.approx(1.0)
    assert alpha == pytest.approx(1.0)


def test_disagreeing_orders_of_one_judge_make_a_tie():
    j = pl.DataFrame({"query_id": ["q", "q"], "a": ["x", "y"], "b": ["y", "x"], "outcome": ["a", "a"], "judge": "j"})
    assert unit_labels({"j": j})["j"].to_list() == ["tie"]
