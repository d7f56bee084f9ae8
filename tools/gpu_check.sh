#!/usr/bin/env bash
# The LLM steps of params/llm-cpu.yaml on an NVIDIA GPU through the `vllm` backend, compared with the
# answers the CPU run recorded (tests/fixtures/real_llm/llm-cpu.jsonl): per template requests, parse
# failures and seconds per call for both, the judge's order agreement and first-position share, and
# how often the GPU model's pairwise verdicts agree with the CPU model's.
#
# Usage: tools/gpu_check.sh [--dry-run] [--model HF_NAME_OR_DIR] [--dtype float32|bfloat16] [--venv DIR]
#   --model  the model vLLM loads (default Qwen/Qwen2.5-Coder-1.5B-Instruct: the CPU run's model
#            in bf16 instead of Q4_K_M; name a larger one, e.g. openai/gpt-oss-20b, to compare)
#   --dtype  vLLM's compute type (default float32: in bf16 the logits round this small model's
#            log-prob margins, mostly under 0.2 nat, to steps of 0.125 and many verdicts tie; see
#            benchmarks/results/vllm_cpu_compare.md)
#   --venv   its own environment (default .venv-gpu): vLLM's CUDA build pins its own torch
#   --dry-run  print the plan and exit
# Env: PYTHON (default python3), GPU_CHECK_MAX_MODEL_LEN (default 4096), VLLM_VERSION (default 0.33.0).
# Once installed it runs in a few minutes on one GPU (model load + ~100 short requests).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
VENV=$ROOT/.venv-gpu
MODEL=Qwen/Qwen2.5-Coder-1.5B-Instruct
DRY=0
VLLM_VERSION=${VLLM_VERSION:-0.33.0}
MAX_LEN=${GPU_CHECK_MAX_MODEL_LEN:-4096}
DTYPE=float32
while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run) DRY=1 ;;
        --model) MODEL=${2:?--model needs a value}; shift ;;
        --dtype) DTYPE=${2:?--dtype needs a value}; shift ;;
        --venv) VENV=${2:?--venv needs a value}; shift ;;
        -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
        *) echo "gpu_check.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
RECORD=$ROOT/runs/gpu_check/$(echo "$MODEL" | tr '/:' '__').jsonl

plan() {
    echo "plan:"
    echo "  1. check the GPU: nvidia-smi"
    echo "  2. environment $VENV: vllm==$VLLM_VERSION (CUDA build, its own torch) + this project (-e $ROOT)"
    echo "  3. load $MODEL in vLLM (llm.backend=vllm, dtype $DTYPE, max_model_len $MAX_LEN, temperature 0 as params/llm-cpu.yaml)"
    echo "  4. run the LLM steps of params/llm-cpu.yaml (topic walk, summaries, tournament, LaTeX formatting,"
    echo "     judge validation) on tests/fixtures/real_llm/inputs, recording the answers in $RECORD"
    echo "  5. print the per-template table and the judge's numbers beside tests/fixtures/real_llm/llm-cpu.jsonl"
    echo "     (the CPU run's recorded answers) and the verdict agreement between the two models"
}

if [ "$DRY" = 1 ]; then
    plan
    exit 0
fi
if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "gpu_check.sh: no NVIDIA GPU here (nvidia-smi not found); run it on a machine with one (--dry-run shows the plan)" >&2
    exit 1
fi
if ! GPUS=$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>&1) || [ -z "$GPUS" ]; then
    echo "gpu_check.sh: nvidia-smi failed, no usable NVIDIA GPU: $GPUS" >&2
    exit 1
fi
echo "GPU: $GPUS"
plan

if ! "$VENV/bin/python" -c "import vllm, saber_lib" >/dev/null 2>&1; then
    echo "building $VENV (vllm==$VLLM_VERSION) ..."
    "$PY" -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip
    "$VENV/bin/pip" install -q "vllm==$VLLM_VERSION"
    "$VENV/bin/pip" install -q -e "$ROOT"
fi

mkdir -p "$(dirname "$RECORD")"
rm -f "$RECORD"
cd "$ROOT"
exec "$VENV/bin/python" -m saber_lib.pipeline.llm_check --record "$RECORD" \
    --set llm.backend=vllm --set "llm.model=$MODEL" --set llm.model_path=null \
    --set llm.tensor_parallel_size=1 --set "llm.max_model_len=$MAX_LEN" --set "llm.engine_kwargs={dtype: $DTYPE}" --set llm.cache=run
