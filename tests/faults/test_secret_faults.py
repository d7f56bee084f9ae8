"""Fault cases of secrets given where the other secrets are masked: a password in ``llm.base_urls``
written as one string (not a list), and tokens and keys in ``llm.engine_kwargs`` (``hf_token``,
``api_key``, ...). No error line, manifest, executed notebook or lock file shows them; the kernel
still gets the real values.

Old behaviour is given per test. In-process for the profile errors and the masking; one real
``saber run`` of a stage that takes the ``llm`` section for the files it writes.
"""
import json
from pathlib import Path

import pytest

from conftest import copy_run, needs_data, saber_cli
from saber_lib import llm as L
from saber_lib.core import config
from saber_lib.core.config_types import ProfileError
from saber_lib.pipeline import cli, runner

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "params" / "tiny.yaml"
PASSWORD = "hunter2-pass"
HF_TOKEN = "hf_veryS3cretT0ken"
API_KEY = "sk-live-engine-4242"
URL = f"http://alice:{PASSWORD}@127.0.0.1:8000/v1"


@pytest.mark.parametrize("value", [URL, [[URL]], {"url": URL}], ids=["a string", "a nested list", "a mapping"])
def test_base_urls_of_the_wrong_type_are_refused_without_the_password(tmp_path, capsys, value):
    # old: "llm.base_urls: expected a list, got 'http://alice:hunter2-pass@...'" in every command's error
    with pytest.raises(ProfileError) as e:
        config.load_profile(TINY, {"llm.base_urls": value})
    assert "llm.base_urls" in str(e.value) and PASSWORD not in str(e.value) and "alice" not in str(e.value)

    profile = tmp_path / "p.yaml"   # the same in a profile file, through the commands
    profile.write_text(f"inherit: {TINY}\nllm:\n  base_urls: {json.dumps(value)}\n")
    for argv in (["validate", str(profile)], ["status", "--params", str(profile), "--run-dir", str(tmp_path / "r")],
                 ["status", "--params", str(TINY), "--run-dir", str(tmp_path / "r"),
                  "--set", f"llm.base_urls={json.dumps(value)}"]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert "llm.base_urls" in err and PASSWORD not in err and "alice" not in err, err


def test_engine_kwargs_secrets_are_masked_in_the_parameters_and_reach_the_backend(monkeypatch):
    # old: llm.engine_kwargs went as they were into the manifest and the executed notebook
    real = {"hf_token": HF_TOKEN, "api_key": API_KEY, "dtype": "half", "max_num_seqs": 8}
    shown, env = runner._secret_free({"llm": {"base_urls": [], "engine_kwargs": real}, "seed": 0})
    assert shown["llm"]["engine_kwargs"] == {"hf_token": "***", "api_key": "***", "dtype": "half", "max_num_seqs": 8}
    assert HF_TOKEN not in json.dumps(shown) and API_KEY not in json.dumps(shown)
    assert HF_TOKEN not in json.dumps(list(env)) and env                # the real values travel in the environment
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert L.real_engine_kwargs(shown["llm"]["engine_kwargs"]) == real     # what the kernel's backend gets
    nothing = {"llm": {"base_urls": [], "engine_kwargs": {"dtype": "half"}}}
    assert runner._secret_free(nothing) == (nothing, {})


def test_secret_keys_in_text_are_masked_and_others_kept():
    # the lock file and error lines mask a command line as text: --set llm.engine_kwargs={hf_token: ...}
    line = (f"saber run all --set 'llm.engine_kwargs={{hf_token: {HF_TOKEN}, \"api_key\": \"{API_KEY}\", "
            f"dtype: half}}' --set llm.max_tokens=1024 --set llm.api_key_env=OPENAI_API_KEY")
    shown = L.redact_text(line)
    assert HF_TOKEN not in shown and API_KEY not in shown
    assert "hf_token: ***" in shown and "dtype: half" in shown and "max_tokens=1024" in shown
    assert "api_key_env=OPENAI_API_KEY" in shown
    assert L.redact_params({"engine_kwargs": {"HF_TOKEN": HF_TOKEN, "tokenizer": "t", "max_tokens": 9}}) == \
        {"engine_kwargs": {"HF_TOKEN": "***", "tokenizer": "t", "max_tokens": 9}}


@needs_data("sources")
@pytest.mark.pipeline
def test_no_file_of_a_run_holds_an_engine_secret(tmp_path, tiny_tournament_run):
    # old: the summaries manifest, the executed notebook and .saber.lock held hf_token and api_key
    # (a copy of the session's tiny run: the summaries stage, which takes the llm section, reruns under it)
    run = copy_run(tiny_tournament_run[0], tmp_path / "run")
    r = saber_cli("run", "summaries", "--params", TINY, "--run-dir", run, "--set", f"run.figures_dir={tmp_path / 'f'}",
                  "--set", f'llm.engine_kwargs={{hf_token: {HF_TOKEN}, api_key: {API_KEY}, dtype: half}}')
    assert r.returncode == 0, r.stderr
    man = json.loads((run / "summaries" / "manifest.json").read_text())
    assert man["parameters"]["llm"]["engine_kwargs"] == {"hf_token": "***", "api_key": "***", "dtype": "half"}
    leaks = [str(p) for p in [*run.rglob("*"), *(tmp_path / "f").rglob("*")] if p.is_file()
             and any(s.encode() in p.read_bytes() for s in (HF_TOKEN, API_KEY))]
    assert leaks == [] and (run / ".saber.lock").is_file()
    assert HF_TOKEN not in r.stdout + r.stderr
