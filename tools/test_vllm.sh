#!/usr/bin/env bash
# The vLLM backend end to end on a CPU (`make test-vllm`): builds its own environment .venv-vllm
# (tools/vllm_env.sh), writes a tiny random-weight model with transformers, and runs tests/vllm.
# Usage: tools/test_vllm.sh [pytest args]     Env: PYTHON (default python3), VLLM_VENV.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=tools/vllm_env.sh
source "$ROOT/tools/vllm_env.sh"
ensure_vllm_venv
cd "$ROOT"
exec "$VENV/bin/python" -m pytest tests/vllm -q -p no:cacheprovider "$@"
