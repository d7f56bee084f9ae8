#!/usr/bin/env bash
# The recorded llama.cpp log-probability judgments (tests/fixtures/real_llm/llm-cpu.jsonl) asked again,
# prompt for prompt, through the `vllm` backend with vLLM's CPU build, and compared judgment by
# judgment (verdicts, margin correlation, seconds per call) in a Markdown report.
#   1. the vLLM environment (tools/vllm_env.sh; built once, ~3.4 GB)
#   2. the model's GGUF checked by sha256 (every run) and converted once to a Hugging Face folder in the
#      model cache (<cache>/hf-models/; the Q4_K_M weights dequantized, 6.7 GB in float32):
#      python -m saber_lib.llm.models to-hf NAME --dtype DTYPE
#   3. the judgments asked through vLLM, one request per call (saber_lib.validation.judge_replay)
#   4. the report (saber_lib.validation.judge_report, in the default environment)
# Usage: tools/vllm_cpu_compare.sh [--pairs N] [--out FILE] [--dtype float32|bfloat16]
#   --pairs  the first N pairs recorded in both orders (default: all)
#   --out    the report (default benchmarks/results/vllm_cpu_compare.md)
#   --dtype  float32 (default) or bfloat16: the HF copy's tensors and vLLM's compute type. In bf16 the
#            logits are rounded to bf16 (steps of 1/16-1/8 nat at this model's logit sizes), coarser
#            than this judge's margins (mostly < 0.2 nat): see benchmarks/results/vllm_cpu_compare.md
# Env: PYTHON, VLLM_VENV (the vLLM environment), REPORT_PYTHON (the default environment's python,
# default .venv/bin/python), OMP_NUM_THREADS (default 2), VLLM_ENABLE_V1_MULTIPROCESSING (default 0),
# SABER_CACHE_DIR.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
NAME=qwen2.5-coder-1.5b-instruct-q4_k_m
PAIRS=()
DTYPE=float32
OUT=$ROOT/benchmarks/results/vllm_cpu_compare.md
while [ $# -gt 0 ]; do
    case "$1" in
        --pairs) PAIRS=(--pairs "${2:?--pairs needs a value}"); shift ;;
        --out) OUT=${2:?--out needs a value}; shift ;;
        --dtype) DTYPE=${2:?--dtype needs a value}; shift ;;
        -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
        *) echo "vllm_cpu_compare.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
REPORT_PY=${REPORT_PYTHON:-$ROOT/.venv/bin/python}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}  # vLLM's CPU worker otherwise drops to 1 thread
export VLLM_ENABLE_V1_MULTIPROCESSING=${VLLM_ENABLE_V1_MULTIPROCESSING:-0}  # engine in-process, as measured
# shellcheck source=tools/vllm_env.sh
source "$ROOT/tools/vllm_env.sh"
ensure_vllm_venv
cd "$ROOT"
"$VENV/bin/python" -m saber_lib.llm.models verify "$NAME"   # sha256 of the GGUF, every run
HF_DIR=$("$VENV/bin/python" -m saber_lib.llm.models to-hf "$NAME" --dtype "$DTYPE" | tail -1)
RECORD=$ROOT/runs/vllm_cpu_compare/vllm.jsonl
mkdir -p "$(dirname "$RECORD")"
"$VENV/bin/python" -m saber_lib.validation.judge_replay --record "$RECORD" "${PAIRS[@]}" \
    --backend vllm --model "$NAME-$DTYPE" --model-path "$HF_DIR" --max-model-len 2048 \
    --engine-kwargs "{\"enforce_eager\": true, \"dtype\": \"$DTYPE\", \"seed\": 0}"
"$REPORT_PY" -m saber_lib.validation.judge_report --other "$RECORD" --out "$OUT" \
    --what "Qwen2.5-Coder-1.5B-Instruct: llama.cpp runs the Q4_K_M GGUF, vLLM (CPU build 0.32.0) its weights dequantized to $DTYPE" \
    --command "tools/vllm_cpu_compare.sh --dtype $DTYPE${PAIRS[*]:+ ${PAIRS[*]}}" \
    --note "Weights: not bit-identical - llama.cpp computes with the Q4_K_M blocks (8-bit quantized activations in its matmuls), vLLM with the dequantized numbers in $DTYPE (transformers' GGUF reader)" \
    --note "Reading: vLLM reads log P(\"1\"), log P(\"2\") exactly at the position after the \\boxed{ prefill (SamplingParams.logprob_token_ids); llama.cpp reads them from its top-20 next-token log-probabilities"
