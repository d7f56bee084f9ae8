"""Fault cases of the evaluate stage's rescaling analysis and of the profile's evaluate and robustness
keys: a scale whose exponential gain overflows (NaN correlations read as "0 of 3 pairs swapped"),
timed settings the stage never scores, unknown rephrased-rank retrievers.

Old behaviour is given per test. ``saber validate`` runs as a real process.
"""
import math
from pathlib import Path

import numpy as np
import pytest

from saber_lib.core.scales import parse_scheme
from saber_lib.metrics.ndcg import ndcg_at_k
from saber_lib.metrics.rescaling import compare_systems, rescale_to_scheme

from conftest import one_line_error as _one_line, saber_cli as saber

ROOT = Path(__file__).resolve().parents[2]


def _profile(tmp_path, text: str) -> Path:
    p = tmp_path / "child.yaml"
    p.write_text(f"inherit: {ROOT / 'params' / 'tiny.yaml'}\n" + text)
    return p


# --------------------------------------------------------------------------- rescaling
@pytest.mark.pipeline
def test_a_scale_whose_exponential_gain_overflows_is_refused_naming_the_key(tmp_path):
    # old: "[0,2000] exp" passed `saber validate`; its gains 2^2000 overflow, every nDCG is NaN and
    # the table said "0 of 3 pairs swapped"
    prof = _profile(tmp_path, "evaluate:\n  rescaling_schemes: ['[0,3] exp round', '[0,2000] exp']\n")
    msg = _one_line(saber("validate", prof), prof, "evaluate.rescaling_schemes", "[0,2000] exp", code=2)
    assert "1000" in msg
    ok = _profile(tmp_path, "evaluate:\n  rescaling_schemes: ['[0,1000] exp', '[0,5000] linear']\n")
    assert saber("validate", ok).returncode == 0


def test_at_the_largest_exponential_scale_ndcg_is_still_computed():
    # ratings 5, 4, 0 on [0, 5] rescaled to [0, 1000]: gains 2^1000 - 1 and 2^800 - 1 (and 0). Ranked
    # 4 first, then 5: DCG = g800 + g1000 / log2(3), ideal = g1000 + g800 / log2(3), so nDCG is
    # 1 / log2(3) up to a relative 2^-200 (hand computed)
    sch = parse_scheme("[0,1000] exp")
    rel = rescale_to_scheme([5.0, 4.0, 0.0], sch, top=5.0)
    assert rel.tolist() == [1000.0, 800.0, 0.0]
    got = ndcg_at_k(rel, np.array([0.5, 0.9, 0.1]), k=3, gain="exp")
    assert math.isfinite(got) and got == pytest.approx(1 / math.log2(3), rel=1e-12)


def test_a_pair_that_could_not_be_compared_never_counts_as_kept():
    # old: NaN means made every order comparison False: "0 of 3 pairs swapped" (perfectly robust)
    ref = {"bm25": 0.30, "tfidf": 0.20, "minilm": 0.10}
    nan = compare_systems(ref, {"bm25": math.nan, "tfidf": math.nan, "minilm": math.nan})
    assert nan["system_pairs"] == 0 and nan["swapped_pairs"] == 0
    assert all(math.isnan(nan[k]) for k in ("pearson", "spearman", "kendall"))
    one = compare_systems(ref, {"bm25": 0.1, "tfidf": 0.2, "minilm": math.nan})
    # only bm25-tfidf is compared, and it swapped (0.30 > 0.20 before, 0.1 < 0.2 after)
    assert (one["swapped_pairs"], one["system_pairs"]) == (1, 1)
    assert one["max_swapped_gap"] == pytest.approx(0.10) and math.isnan(one["pearson"])
    full = compare_systems(ref, {"bm25": 0.3, "tfidf": 0.1, "minilm": 0.2})
    assert (full["swapped_pairs"], full["system_pairs"]) == (1, 3) and full["kendall"] == pytest.approx(1 / 3)


# --------------------------------------------------------------------------- evaluate and robustness keys
@pytest.mark.pipeline
def test_timed_settings_outside_the_scored_settings_are_refused(tmp_path):
    # old: passed `saber validate`; the stage timed a setting it never scored (no rows)
    prof = _profile(tmp_path, "evaluate:\n  settings: [statement-full]\n  latency_settings: [full-full]\n")
    _one_line(saber("validate", prof), prof, "evaluate.latency_settings", "'full-full'", code=2)


@pytest.mark.pipeline
def test_unknown_rephrased_rank_retriever_is_refused(tmp_path):
    # old: passed `saber validate`; the robustness stage failed (or skipped it) hours later
    prof = _profile(tmp_path, "robustness:\n  rr_retrievers: [bm25, no-such-retriever]\n")
    _one_line(saber("validate", prof), prof, "robustness.rr_retrievers", "no-such-retriever", code=2)
