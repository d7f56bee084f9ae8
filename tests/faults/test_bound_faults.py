"""Fault cases of profile values a typo makes harmful: counts a few extra digits turn into hours or
terabytes (each has an upper bound, generous for the paper's values), and a secret typed into a key
that names an environment variable (refused without being shown; masked wherever shown).

Old behaviour is given per test. Profiles are real files in a temporary folder inheriting a copy of
params/paper.yaml; the command line runs as a real process.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from saber_lib.core import config as cfg
from saber_lib.core.config_types import INT_MAX
from saber_lib.llm.redact import redact_params, redact_text
from test_profile_faults import _child, _error, paper  # noqa: F401 (paper: the fixture; one line naming file and key)

ROOT = Path(__file__).resolve().parents[2]
SECRET = "sk-planted-Secret-7a7a/x+y"


# --------------------------------------------------------------------------- upper bounds
BOUNDS = {"evaluate.n_bootstrap": 1_000_000, "signals.memory_budget_mb": 16 * 2**20,
          "corpus.max_records_per_source": 10_000_000}


@pytest.mark.parametrize("key", sorted(BOUNDS))
def test_a_count_just_over_its_bound_is_one_error_naming_key_and_file(tmp_path, paper, key):
    # old: anything up to 2^31-1 passed (n_bootstrap: 1000000000, one typed zero too many, ran for days)
    sec, name = key.split(".")
    bound = BOUNDS[key]
    assert bound < INT_MAX
    child = _child(tmp_path, f"{sec}:\n  {name}: {bound + 1}\n")
    msg = _error(child)
    assert str(child.resolve()) in msg and key in msg and f"above the maximum {bound}" in msg
    assert key in _error(paper, {key: bound + 1}) and "<command line>" in _error(paper, {key: bound + 1})
    assert cfg.load_profile(child.parent / "paper.yaml", {key: bound}).values[sec][name] == bound


def test_the_paper_and_the_shipped_profiles_are_within_the_bounds(tmp_path, paper):
    values = cfg.load_profile(ROOT / "params" / "paper.yaml").values
    assert values["evaluate"]["n_bootstrap"] == 1000 and values["signals"]["memory_budget_mb"] == 2048
    assert values["corpus"]["max_records_per_source"] == 0               # 0 = every record
    # generous: ten times the paper's resamples, a cluster's memory budget, the largest source whole
    p = cfg.load_profile(paper, {"evaluate.n_bootstrap": 10_000, "signals.memory_budget_mb": 102_400,
                                 "corpus.max_records_per_source": 12_500})
    assert p.values["evaluate"]["n_bootstrap"] == 10_000
    for name in ("demo", "tiny", "cluster", "released", "llm-cpu"):
        cfg.load_profile(ROOT / "params" / f"{name}.yaml")


# --------------------------------------------------------------------------- a secret in an *_env key
def test_a_secret_in_api_key_env_is_refused_without_being_shown(tmp_path, paper):
    # old: accepted; the key then sat in the lock file, the executed notebooks and every manifest
    child = _child(tmp_path, f"llm:\n  api_key_env: {SECRET}\n")
    msg = _error(child)
    assert str(child.resolve()) in msg and "llm.api_key_env" in msg and "environment variable" in msg
    assert SECRET not in msg and "sk-" not in msg
    msg = _error(paper, {"llm.api_key_env": SECRET})
    assert msg.startswith("<command line>") and SECRET not in msg
    assert SECRET not in _error(paper, {"llm.api_key_env": 12345678}).replace("12345678", SECRET)
    assert "12345678" not in _error(paper, {"llm.api_key_env": 12345678})
    for ok in ("OPENAI_API_KEY", "_KEY2", "x"):
        assert cfg.load_profile(paper, {"llm.api_key_env": ok}).values["llm"]["api_key_env"] == ok


def test_a_secret_in_api_key_env_on_the_command_line_reaches_no_file(tmp_path):
    # old: `saber run` ran; the command line, secret included, stayed in <run>/.saber.lock
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "saber_lib.pipeline.cli", "run", "corpus", "--params",
           str(ROOT / "params" / "tiny.yaml"), "--run-dir", str(run), "--set", f"run.figures_dir={tmp_path / 'fig'}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for item in (f"llm.api_key_env={SECRET}", f"llm.api_key_env=[{SECRET}"):   # valid YAML, and not
        r = subprocess.run([*cmd, "--set", item], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
        assert r.returncode == 2, r.stdout + r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in r.stderr and "llm.api_key_env" in lines[0], r.stderr
        assert SECRET not in r.stdout + r.stderr and "sk-planted" not in r.stderr
    written = [p for p in tmp_path.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert written == []


def test_the_masking_covers_env_keys():
    # old: shown as typed: redact_text knew URLs, headers and bearer tokens only
    for text in (f"saber run all --set llm.api_key_env={SECRET}", f"api_key_env: {SECRET}",
                 json.dumps({"api_key_env": SECRET})):
        shown = redact_text(text)
        assert SECRET not in shown and "api_key_env" in shown and "***" in shown
    for text in ("--set llm.api_key_env=OPENAI_API_KEY", "trust_env: true"):   # names stay as they are
        assert redact_text(text) == text
    assert redact_params({"llm": {"api_key_env": SECRET, "trust_env": True, "model": "m"}}) == \
        {"llm": {"api_key_env": "***", "trust_env": True, "model": "m"}}
    assert redact_params({"api_key_env": "OPENAI_API_KEY"}) == {"api_key_env": "OPENAI_API_KEY"}
