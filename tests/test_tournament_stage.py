"""The tournament stage's recipes (saber_lib.judging.stage) on hand-made frames."""
import math

import matplotlib.pyplot as plt
import numpy as np
import polars as pl

from saber_lib.judging import stage as tournament_stage
from saber_lib.judging.tournament import judgment_summary


def test_text_clip_only_for_the_llm_judge():
    assert tournament_stage.text_clip("llm", {"text_max_words": 120}) == 120
    assert tournament_stage.text_clip("llm", {}) == 0
    assert tournament_stage.text_clip("proxy", {"text_max_words": 120}) == 0


def test_backends_line_and_banner_flag_a_stand_in():
    assert tournament_stage.judge_backends_line("gpt", True, "swiss", 0) == "judge: gpt; schedule: swiss"
    assert (tournament_stage.judge_backends_line("sim", False, "random", 80)
            == "judge: sim (NOT the paper's LLM judge); schedule: random; texts clipped to 80 words per problem and solution")
    assert tournament_stage.judge_banner("gpt", True, "swiss", 20) == "**Judge:** `gpt`, schedule `swiss`, 20 rounds"
    assert tournament_stage.judge_banner("sim", False, "swiss", 4).endswith("ratings are not the paper's.")


def _judgments():
    # q1: a wins twice, one tie, one failure; q2: one b win and one failure (no first-shown win)
    return pl.DataFrame({"query_id": ["q1"] * 4 + ["q2"] * 2, "round": [1, 1, 2, 2, 1, 1],
                         "outcome": ["a", "a", "tie", "failure", "b", "failure"],
                         "position_consistent": [None] * 6}, schema_overrides={"position_consistent": pl.Boolean})


def test_judgment_rates_and_table_by_hand():
    per_query = judgment_summary(_judgments())
    rates = tournament_stage.judgment_rates(per_query)
    assert rates["failure rate"].to_list() == [0.25, 0.5]
    assert rates["first-shown win rate"].to_list() == [1.0, 0.0]      # 2 of 2 decided; 0 of 1 decided
    table = tournament_stage.judgments_table(per_query)
    assert table["statistic"].to_list() == ["mean", "std", "min", "50%", "max"]
    row = dict(zip(table["statistic"], table["judgments"]))
    assert row["mean"] == 3.0 and row["min"] == 2.0 and row["max"] == 4.0 and math.isclose(row["std"], math.sqrt(2))
    fig = tournament_stage.judgments_figure(per_query)
    assert sum(p.get_height() for p in fig.axes[0].patches) == 2          # two queries
    plt.close(fig)


def _ratings():
    return pl.DataFrame({"query_id": ["q1", "q1", "q2", "q2", "q3"], "group": ["both", "topic-only", "both", "both", "topic-only"],
                         "rating": [5.0, 1.0, 3.0, 0.0, 2.0]})


def test_ratings_by_group_by_hand():
    got = tournament_stage.ratings_by_group(_ratings())
    assert got.rows() == [("both", 8 / 3, 3), ("topic-only", 1.5, 2)]


def test_rating_figures_have_one_panel_per_query_and_one_curve_per_group():
    fig = tournament_stage.query_histograms_figure(_ratings(), 5.0, n_queries=2)
    drawn = [ax for ax in fig.axes if ax.axison]
    assert [ax.get_title() for ax in drawn] == ["q1", "q2"]
    assert [sum(p.get_height() for p in ax.patches) for ax in drawn] == [2, 2]
    plt.close(fig)
    fig = tournament_stage.group_histogram_figure(_ratings(), 5.0)
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["topic-only", "both"]   # no summary-only
    assert all(np.isclose(p.get_xy()[:, 0].max(), 5.0) for p in fig.axes[0].patches)   # bins end at the top rating
    plt.close(fig)
