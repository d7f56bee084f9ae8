"""Fault cases of a setting given twice where one value is used: ``saber plan --rate`` naming a stage
twice (the last one won), and a rescaling scheme listed twice in ``evaluate.rescaling_schemes`` (two
identical rows in the robustness table). Each is one line naming the option or the key, exit 2.

Old behaviour is given per test. In-process: the command line's ``main`` and the profile loader.
"""
from pathlib import Path

import polars as pl
import pytest

from saber_lib.core import config
from saber_lib.core.config_types import ProfileError
from saber_lib.evaluate import analyses
from saber_lib.pipeline import cli

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "params" / "tiny.yaml"


def test_a_stage_rate_given_twice_is_refused(capsys):
    # old: saber plan --rate summaries=1 --rate summaries=2 planned with 2 (the last), without a word
    base = ["plan", "--params", str(TINY), "--gpus", "1", "--judge-rate", "1"]
    assert cli.main([*base, "--rate", "summaries=1"]) == 0     # once: planned
    capsys.readouterr()
    assert cli.main([*base, "--rate", "summaries=1", "--rate", "summaries=2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--rate" in err[0] and "summaries" in err[0] and "twice" in err[0], err


@pytest.mark.parametrize("schemes", [["[0,3] exp", "[0,5] linear", "[0,3] exp"],
                                     ["[0,3] exp round", "[ 0 , 3 ]  exp  round"]], ids=["same text", "same scheme"])
def test_a_rescaling_scheme_listed_twice_is_refused(schemes):
    # old: the scheme was replayed twice and the robustness table had two identical rows
    with pytest.raises(ProfileError, match=r"evaluate.rescaling_schemes: .*'\[0,3\] exp.*' is listed twice \(entries "
                                           rf"0 and {len(schemes) - 1}\)"):
        config.load_profile(TINY, {"evaluate.rescaling_schemes": schemes})
    one = pl.DataFrame({"retriever": ["a"], "setting": ["statement-full"], "query_id": ["q"], "ndcg": [1.0]})
    with pytest.raises(ValueError, match=r"evaluate.rescaling_schemes: .* is listed twice"):   # the library entry too
        analyses.rescaling_table(one, one.drop("ndcg"), pl.DataFrame({"query_id": ["q"], "rating": [1.0]}), schemes,
                                 top=5.0, k=10)
    assert config.load_profile(TINY, {"evaluate.rescaling_schemes": schemes[:-1]})   # each once: accepted
