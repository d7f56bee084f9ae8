"""Fault cases of profiles: errors found at load time, each one line naming the file
and line, or the key (or the --set item).

Old behaviour is given per test; every profile here is a real file in a temporary folder that
inherits a copy of params/paper.yaml.
"""
import subprocess
import sys
from pathlib import Path

import pytest

from saber_lib.core import config as cfg
from saber_lib.pipeline.runner import load_run_profile
from saber_lib.retrieval import registry
from saber_lib.core.config_types import ProfileError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def paper(tmp_path):
    p = tmp_path / "paper.yaml"
    p.write_text((ROOT / "params" / "paper.yaml").read_text())
    return p


def _child(tmp_path, text, name="child.yaml"):
    p = tmp_path / name
    p.write_text("inherit: paper.yaml\n" + text)
    return p


def _error(path, overrides=None) -> str:
    """The one-line error of loading ``path`` for a run (the schema, then the registries' names)."""
    with pytest.raises(ProfileError) as e:
        load_run_profile(path, overrides)
    msg = str(e.value)
    assert "\n" not in msg, msg
    return msg


# --------------------------------------------------------------------------- .nan / .inf
@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf", ".NaN"])
def test_non_finite_float_is_rejected_naming_file_and_key(tmp_path, paper, value):
    # old: accepted (nan passes every range comparison), the stage failed or computed garbage later
    child = _child(tmp_path, f"topics:\n  tau: {value}\n")
    msg = _error(child)
    assert str(child.resolve()) in msg and "topics.tau" in msg and "not a finite number" in msg


def test_non_finite_value_in_a_float_map_and_on_the_command_line(tmp_path, paper):
    child = _child(tmp_path, "evaluate:\n  mteb_scores: {minilm: .nan}\n")
    assert "evaluate.mteb_scores" in _error(child)
    msg = _error(paper, {"tournament.bt_alpha": float("inf")})
    assert "<command line>" in msg and "tournament.bt_alpha" in msg


# --------------------------------------------------------------------------- duplicated keys
def test_duplicated_key_names_file_and_line(tmp_path, paper):
    # old: PyYAML silently kept the last value (K: 9)
    child = _child(tmp_path, "thresholds:\n  K: 7\n  Q_min: 3\n  K: 9\n")
    msg = _error(child)
    assert str(child.resolve()) in msg and "line 5" in msg and "'K'" in msg and "line 3" in msg


def test_duplicated_section_is_an_error_too(tmp_path, paper):
    child = _child(tmp_path, "select:\n  n_queries: 4\nselect:\n  n_queries: 5\n")
    msg = _error(child)
    assert "line 4" in msg and "'select'" in msg


def test_the_same_key_in_two_sections_or_two_files_is_not_a_duplicate(tmp_path, paper):
    child = _child(tmp_path, "thresholds:\n  K: 7\nselect:\n  n_queries: 4\n")
    assert cfg.load_profile(child).values["thresholds"]["K"] == 7


# --------------------------------------------------------------------------- retriever names
def test_unknown_retriever_rejected_at_load_time(tmp_path, paper):
    # old: accepted; reported only when the evaluate notebook ran (after the whole pipeline)
    child = _child(tmp_path, "evaluate:\n  retrievers: [bm25, minilmm]\n")
    msg = _error(child)
    assert str(child.resolve()) in msg and "evaluate.retrievers" in msg and "'minilmm'" in msg


def test_unknown_math_vs_words_retriever_and_run_files_there(tmp_path, paper):
    msg = _error(_child(tmp_path, "math_vs_words:\n  mvw_retrievers: [bm25, bm26]\n"))
    assert "math_vs_words.mvw_retrievers" in msg and "'bm26'" in msg
    # a run file scores fixed query ids; math-vs-words rescores rewritten query texts
    msg = _error(_child(tmp_path, "math_vs_words:\n  mvw_retrievers: ['run:x.trec']\n", "c2.yaml"))
    assert "math_vs_words.mvw_retrievers" in msg and "run file" in msg
    msg = _error(_child(tmp_path, "math_vs_words:\n  mvw_selected: [mpnet-bf16]\n", "c3.yaml"))
    assert "math_vs_words.mvw_selected" in msg


def test_valid_retriever_names_load(tmp_path, paper):
    names = ["bm25", "approach0", "e5-small", "use-m", "run:some/system.trec"]
    p = load_run_profile(_child(tmp_path, f"evaluate:\n  retrievers: {names}\n"))
    assert p.values["evaluate"]["retrievers"] == names[:-1] + [f"run:{Path('some/system.trec').resolve()}"]
    assert "give the file's path" in _error(_child(tmp_path, "evaluate:\n  retrievers: ['run:']\n", "c4.yaml"))
    assert "listed twice" in _error(_child(tmp_path, "evaluate:\n  retrievers: [bm25, bm25]\n", "c5.yaml"))


def test_unknown_encoder_for_topics_rejected(tmp_path, paper):
    msg = _error(_child(tmp_path, "topics:\n  topic_embed_model: minilm-l12\n"))
    assert "topics.topic_embed_model" in msg


def test_the_profile_checks_and_the_factory_read_one_registry():
    """Every registered name passes the profile check and builds; an unknown one fails both, and
    every encoder of saber_lib.embed is a registered retriever."""
    from saber_lib import embed

    assert set(embed.REGISTRY) <= set(registry.retriever_names())
    for name in ["bm25", "tfidf", "jaccard", "bm25-a0", "jaccard-ws", "run:x"]:
        assert registry.retriever_name_error(name) is None
    with pytest.raises(KeyError):
        registry.get_retriever("minilmm")
    assert "'minilmm'" in registry.retriever_name_error("minilmm")


# --------------------------------------------------------------------------- threshold_rule: fixed
def test_fixed_rule_without_taus_blames_the_file_that_chose_fixed(tmp_path, paper):
    # old: "<...>/paper.yaml: thresholds.tau_topic: must be set ..." although paper.yaml says 'paper'
    child = _child(tmp_path, "thresholds:\n  threshold_rule: fixed\n  tau_topic: 0.9\n")
    msg = _error(child)
    assert msg.startswith(str(child.resolve()) + ":")
    assert "thresholds.threshold_rule" in msg and "thresholds.tau_summ" in msg
    assert "tau_topic" not in msg.split("needs")[1].split("(")[0]


def test_fixed_rule_from_the_command_line_is_blamed_on_the_command_line(paper):
    msg = _error(paper, {"thresholds.threshold_rule": "fixed"})
    assert msg.startswith("<command line>:") and "tau_topic and thresholds.tau_summ" in msg


# --------------------------------------------------------------------------- --set
def _saber(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "saber_lib.pipeline.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


@pytest.mark.pipeline
def test_set_with_bad_yaml_gives_one_line_naming_the_item(tmp_path):
    # old: a raw yaml.parser.ParserError traceback
    r = _saber("run", "corpus", "--params", "params/tiny.yaml", "--run-dir", str(tmp_path / "run"),
               "--set", "topics.tau=[0.9")
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr
    assert "--set 'topics.tau=[0.9'" in lines[0] and "not valid YAML" in lines[0]
    assert not (tmp_path / "run").exists()


@pytest.mark.pipeline
def test_set_with_non_finite_value_and_malformed_item(tmp_path):
    r = _saber("run", "corpus", "--params", "params/tiny.yaml", "--run-dir", str(tmp_path / "run"),
               "--set", "topics.tau=.nan")
    assert r.returncode == 2 and "topics.tau" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = _saber("run", "corpus", "--params", "params/tiny.yaml", "--set", "tau=0.9")
    assert r.returncode == 2 and "--set 'tau=0.9'" in r.stderr


@pytest.mark.pipeline
def test_set_twice_is_an_error():
    from saber_lib.pipeline.cli import _overrides

    assert _overrides(["topics.tau=0.8", "select.n_queries=4"]) == {"topics.tau": 0.8, "select.n_queries": 4}
    with pytest.raises(ProfileError, match="topics.tau is set twice"):
        _overrides(["topics.tau=0.8", "topics.tau=0.9"])


def test_profile_with_broken_yaml_is_one_line(tmp_path, paper):
    child = _child(tmp_path, "topics:\n  tau: [0.9\n")
    msg = _error(child)
    assert str(child.resolve()) in msg and "not valid YAML" in msg
