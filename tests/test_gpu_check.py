"""tools/gpu_check.sh: its plan (--dry-run) and its refusal on a machine without an NVIDIA GPU."""
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tools" / "gpu_check.sh"


def run(args, path):
    env = {**os.environ, "PATH": path}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=60)


def test_dry_run_prints_the_plan_and_touches_nothing(tmp_path):
    venv = tmp_path / "venv"
    r = run(["--dry-run", "--model", "some/Model-7B", "--venv", str(venv)], os.environ["PATH"])
    assert r.returncode == 0, r.stderr
    assert "load some/Model-7B in vLLM" in r.stdout and f"environment {venv}: vllm==" in r.stdout
    assert "tests/fixtures/real_llm/llm-cpu.jsonl" in r.stdout and "some_Model-7B.jsonl" in r.stdout
    assert not venv.exists()


def test_the_compute_type_defaults_to_float32_and_can_be_named():
    default = run(["--dry-run"], os.environ["PATH"])
    named = run(["--dry-run", "--dtype", "bfloat16"], os.environ["PATH"])
    assert "dtype float32," in default.stdout and "dtype bfloat16," in named.stdout


def test_without_nvidia_smi_it_fails_clearly(tmp_path):
    r = run(["--venv", str(tmp_path / "venv")], "/usr/bin:/bin")
    assert r.returncode == 1 and "no NVIDIA GPU here (nvidia-smi not found)" in r.stderr
    assert not (tmp_path / "venv").exists()


def test_a_failing_nvidia_smi_is_no_gpu(tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver'\nexit 9\n")
    (fake / "nvidia-smi").chmod(0o755)
    r = run(["--venv", str(tmp_path / "venv")], f"{fake}:/usr/bin:/bin")
    assert r.returncode == 1 and "nvidia-smi failed, no usable NVIDIA GPU" in r.stderr
    assert "could not communicate" in r.stderr and not (tmp_path / "venv").exists()


def test_unknown_argument_is_refused():
    r = run(["--gpus", "2"], os.environ["PATH"])
    assert r.returncode == 2 and "unknown argument --gpus" in r.stderr
