"""Inversion counting and the inversions-vs-rounds study."""
import itertools

import numpy as np
import polars as pl
import pytest
from scipy import stats

from saber_lib.studies import inversions
from saber_lib.judging.schedules import exhaustive_rounds
from saber_lib.judging.tournament import Doc, plan_queries, run_tournament
from saber_lib.judging.simulated import SimulatedJudge


def test_count_inversions_hand_cases():
    assert inversions.count_inversions([1, 2, 3], [1, 3, 2]) == (1, 3)
    assert inversions.count_inversions([1, 2, 3], [3, 2, 1]) == (3, 3)
    # pairs tied in either ranking are skipped: (0,1) tied in a, (1,2) tied in b
    assert inversions.count_inversions([1, 1, 2], [5, 3, 3]) == (1, 1)
    with pytest.raises(ValueError):
        inversions.count_inversions([1, 2], [1, 2, 3])


def test_count_inversions_matches_kendall_tau_without_ties():
    rng = np.random.default_rng(0)
    for n in (5, 30, 150):
        a, b = rng.normal(size=n), rng.normal(size=n)
        inv, comp = inversions.count_inversions(a, b)
        tau = stats.kendalltau(a, b).statistic
        assert comp == n * (n - 1) // 2
        assert inv == round((1 - tau) / 2 * comp)


def _codes(s, seed=0, agreement=0.78):
    judge = SimulatedJudge(agreement, seed, strengths={("q", str(i)): v for i, v in enumerate(s)})
    return inversions.simulated_codes(judge, "q", len(s))


def test_simulated_outcomes_are_antisymmetric_and_calibrated():
    rng = np.random.default_rng(1)
    iu = np.triu_indices(150, 1)
    agree = []
    for k in range(20):  # the agreement of one query varies with its strengths' spread: average
        s = rng.standard_normal(150)
        code = _codes(s, seed=k)
        assert np.all(code == -code.T) and np.all(np.diag(code) == 0)
        agree.append(np.mean((code[iu] == 1) == (s[iu[0]] > s[iu[1]])))
    assert np.mean(agree) == pytest.approx(0.78, abs=0.01)


def test_codes_from_judgments_roundtrip():
    j = pl.DataFrame({"a": ["x", "z", "y"], "b": ["y", "x", "z"], "outcome": ["a", "tie", "failure"]})
    code = inversions.codes_from_judgments(j, ["x", "y", "z"])
    assert code[0, 1] == 1 and code[1, 0] == -1
    assert code[2, 0] == 0 and code[0, 2] == 0
    assert code[1, 2] == 2 and code[2, 1] == 2


def test_exhaustive_schedule_reproduces_the_reference_and_swiss_beats_random():
    rng = np.random.default_rng(2)
    n = 40
    code = _codes(rng.standard_normal(n))
    ref = inversions.exhaustive_theta(code)
    curve = inversions.play_schedule(code, "exhaustive", exhaustive_rounds(n), 0, "q", reference=ref)
    assert curve[-1]["judgments"] == n * (n - 1) // 2
    assert curve[-1]["inversions"] == 0
    # inversions shrink as rounds add judgments, for every schedule
    for sch in ("swiss", "random", "adaptive"):
        c = inversions.play_schedule(code, sch, 15, 0, "q", reference=ref)
        assert c[-1]["inversions"] < c[4]["inversions"]
        assert all(r["judgments"] <= r["round"] * n // 2 for r in c)


def test_simulated_study_is_seeded_and_swiss_beats_random_on_average():
    a = inversions.simulated_study(30, 6, 8, seed=3)
    b = inversions.simulated_study(30, 6, 8, seed=3)
    assert a.equals(b)
    assert set(a["schedule"]) == {"swiss", "random", "adaptive"}
    s = inversions.curve_summary(a)
    last = {r["schedule"]: r["inversions"] for r in s.filter(pl.col("round") == 8).iter_rows(named=True)}
    assert last["swiss"] < last["random"]


def test_judgments_to_reach_interpolates():
    s = pl.DataFrame({"setting": ["simulated"] * 3, "schedule": ["x"] * 3, "round": [1, 2, 3],
                      "judgments": [10.0, 20.0, 30.0], "inversions": [100.0, 60.0, 40.0]})
    assert inversions.judgments_to_reach(s, "x", 50.0) == pytest.approx(25.0)
    assert inversions.judgments_to_reach(s, "x", 100.0) == pytest.approx(10.0)
    assert np.isnan(inversions.judgments_to_reach(s, "x", 10.0))
    # an early dip (few comparable pairs) does not count: the last crossing does
    s2 = pl.DataFrame({"setting": ["simulated"] * 4, "schedule": ["x"] * 4, "round": [1, 2, 3, 4],
                       "judgments": [10.0, 20.0, 30.0, 40.0], "inversions": [10.0, 100.0, 60.0, 40.0]})
    assert inversions.judgments_to_reach(s2, "x", 50.0) == pytest.approx(35.0)


def test_real_study_uses_stored_exhaustive_judgments(tmp_path):
    rows, docs = [], {}
    for q in range(2):
        docs[f"q{q}"] = Doc(f"q{q}", "query")
        for p in range(8):
            docs[f"c{q}{p}"] = Doc(f"c{q}{p}", "cand")
            rows.append({"query_id": f"q{q}", "cand_id": f"c{q}{p}", "position": p, "group": "both"})
    bench = pl.DataFrame(rows)
    res = run_tournament(bench, docs, SimulatedJudge(0.8), schedule="exhaustive", store_dir=tmp_path / "s")
    curves = inversions.real_study(res.judgments, bench, max_rounds=7, schedules=("swiss", "exhaustive"))
    assert set(curves["setting"]) == {"real"} and curves["query_id"].n_unique() == 2
    # the exhaustive schedule replayed from the stored judgments: all 28 pairs, no inversion left
    ex = curves.filter((pl.col("schedule") == "exhaustive") & (pl.col("round") == 7))
    assert ex["judgments"].to_list() == [28, 28] and ex["inversions"].to_list() == [0, 0]
    # Swiss replays the same outcomes as a direct simulation on the code matrix
    plan = plan_queries(bench)[0]
    code = inversions.codes_from_judgments(res.judgments.filter(pl.col("query_id") == "q0"), plan.cand_ids)
    direct = inversions.play_schedule(code, "swiss", 7, 0, "q0")
    sw = curves.filter((pl.col("schedule") == "swiss") & (pl.col("query_id") == "q0")).sort("round")
    assert sw["inversions"].to_list() == [r["inversions"] for r in direct]


def test_plot_inversions_draws_every_schedule():
    s = inversions.curve_summary(inversions.simulated_study(12, 2, 3, seed=0))
    fig = inversions.plot_inversions(s, "simulated", 12)
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert labels == ["swiss", "random", "adaptive"]
