"""The one judge registry: every spec parses and builds in every place that takes a judge, a user's
judge registers in one file, a clashing kind is one error naming the module, and the profile's
judge-valued keys are checked by the registry (plugins included)."""
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from saber_lib.core import config as cfg
from saber_lib.core.config_types import ProfileError
from saber_lib.judging import Judge, register_judge, registry
from saber_lib.judging.judge_base import JudgeFault
from saber_lib.judging.judges import MajorityJudge, SwappedJudge
from saber_lib.judging.registry import JudgeContext, JudgeKindClash, JudgeSettings, build_judge
from saber_lib.judging.simulated import SimulatedJudge
from saber_lib.judging.spec_judges import judge_answers, judge_from_profile
from saber_lib.judging.tournament import Doc, run_tournament

ROOT = Path(__file__).resolve().parent.parent
PLUGINS = ROOT / "tests" / "plugins"
TINY = ROOT / "params" / "tiny.yaml"
sys.path.insert(0, str(PLUGINS))
import shorter_judge  # noqa: E402  (registers the kind "shorter")


def test_the_kinds_of_every_place_are_one_list():
    # judge-check's, the panel's, the tournament's and the validation stage's specs all parse here
    for spec in ("profile", "llm", "llm:logprob", "ordinal", "proxy", "proxy:use-m", "proxy:nomic-embed",
                 "simulated", "simulated:0.9", "majority", "majority:3", "majority:3:simulated", "first",
                 "signal:topic", "signal:summary", "blend:proxy:minilm+signal:summary:0.3", "shorter"):
        assert registry.spec_error(spec) is None, spec
    assert "shorter" in registry.kinds() and "shorter" in registry.usage()


def test_a_registered_judge_builds_and_answers():
    q, a, b = Doc("q", "x"), Doc("a", "a much longer problem"), Doc("b", "short")
    judge = build_judge("shorter")
    assert isinstance(judge, Judge) and judge.judge_pairs([(q, a, b), (q, b, a), ("q", "ab", "cd")]) == [2, 1, 0]
    assert judge_answers(judge, [(q, a, b)]).labels == ["b"]
    blend = judge_answers(build_judge("blend:shorter+first:0.75"), [(q, a, b), (q, b, a)])
    assert blend.labels == ["b", "a"]           # 0.75 x (-1 | +1) + 0.25 x (+1): the shorter judge decides


def test_a_kind_clashing_with_a_built_in_names_both_modules():
    with pytest.raises(JudgeKindClash, match=rf"'proxy' registered by module {__name__} .* module "
                                             r"saber_lib\.judging\.spec_judges"):
        register_judge("proxy")(lambda arg: None)
    assert registry.spec_error("proxy:use-m") is None           # the built-in is untouched


def test_a_factory_that_returns_no_judge_is_named(monkeypatch):
    monkeypatch.setattr(registry, "_KINDS", dict(registry._KINDS))   # the kind registered here goes with the test
    @register_judge("not-a-judge")
    def _bad(arg):
        return "verdicts"
    with pytest.raises(JudgeFault, match=rf"factory of module {__name__} returned str"):
        build_judge("not-a-judge")


def test_combinators_build_from_the_profile_settings():
    st = JudgeSettings.paper(judge="simulated", judge_sim_agreement=0.9, seed=4, position_swap=True, majority_votes=3)
    ctx = JudgeContext(st)
    maj = build_judge("majority", ctx)
    assert isinstance(maj, MajorityJudge) and len(maj.judges) == 3
    assert maj.judges[0].agreement == 0.9 and not isinstance(maj.judges[0], SwappedJudge)   # the base judge
    assert build_judge("simulated:0.6", ctx).agreement == 0.6
    assert isinstance(build_judge("profile", ctx).inner, SwappedJudge)
    with pytest.raises(ValueError, match="needs an LLM backend"):
        build_judge("majority:2:llm", ctx)
    with pytest.raises(ValueError, match="selection signals"):
        build_judge("signal:topic", ctx)


def test_the_profile_checks_judge_keys_by_the_registry(tmp_path):
    for key, value, fragment in (("tournament.judge", "proxy:nope", "unknown encoder 'nope'"),
                                 ("tournament.judge", "profile", "refers to the profile's own judge"),
                                 ("tournament.judge", "majority:3", "refers to the profile's own judge"),
                                 ("judge_validation.jv_second_judge", "oracle", "unknown kind 'oracle'"),
                                 ("robustness.flip_judges", ["simulated", "blend:first"], "exactly two judges")):
        with pytest.raises(ProfileError, match=rf"{key}: .*{fragment}"):
            cfg.load_profile(TINY, {key: value})
    prof = cfg.load_profile(TINY, {"tournament.judge": "shorter", "robustness.flip_judges": ["proxy:nomic-embed"]})
    assert prof.values["tournament"]["judge"] == "shorter"


def test_a_plugin_kind_is_unknown_until_its_module_is_loaded():
    code = ("from saber_lib.core import config; from saber_lib.pipeline import runner\n"
            "try:\n    config.load_profile('params/tiny.yaml', {'tournament.judge': 'shorter'})\n"
            "except Exception as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "tournament.judge: judge 'shorter': unknown kind 'shorter'" in out.stdout


def test_a_plugin_judge_plays_the_tournament_of_the_tiny_profile(tmp_path):
    prof = cfg.load_profile(TINY, {"tournament.judge": "shorter"})
    flat = {**prof.flat(["tournament", "run"]), "llm": prof.section("llm")}   # as the runner injects them
    judge = judge_from_profile(JudgeSettings.from_params(flat))
    assert judge.name == "shorter text wins"
    texts = {"q": "query", "c1": "a", "c2": "bbb", "c3": "cc", "c4": "dddd"}
    docs = {k: Doc(k, v) for k, v in texts.items()}
    bench = pl.DataFrame({"query_id": ["q"] * 4, "cand_id": ["c1", "c2", "c3", "c4"], "position": [0, 1, 2, 3]})
    res = run_tournament(bench, docs, judge, schedule=prof.values["tournament"]["schedule"], rounds=3,
                         seed=prof.values["run"]["seed"], alpha=prof.values["tournament"]["bt_alpha"],
                         top=prof.values["tournament"]["rating_top"], store_dir=tmp_path)
    for a, b, outcome in res.judgments.select("a", "b", "outcome").iter_rows():
        shorter = a if len(docs[a].text) < len(docs[b].text) else b
        assert outcome == ("a" if shorter == a else "b")
    order = res.ratings.sort("rating", descending=True)["cand_id"].to_list()
    assert order[0] == "c1" and order[-1] == "c4"          # shortest text rated highest


def test_simulated_spec_is_the_simulated_judge():
    st = JudgeSettings.paper(judge_sim_agreement=0.78, seed=7)
    items = [(f"q{k}", f"a{k}", f"b{k}") for k in range(30)]
    assert build_judge("simulated", JudgeContext(st)).judge_pairs(items) == SimulatedJudge(0.78, seed=7).judge_pairs(items)
