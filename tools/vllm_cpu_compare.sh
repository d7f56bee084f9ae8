#!/usr/bin/env bash
# The recorded llama.cpp log-probability judgments (tests/fixtures/real_llm/llm-cpu.jsonl) asked again,
# prompt for prompt, through the `vllm` backend with vLLM's CPU build, and compared judgment by
# judgment (verdicts, margin correlation, seconds per call) in a Markdown report.
#   1. the vLLM environment (tools/vllm_env.sh; built once, ~3.4 GB)
#   2. the model's GGUF checked by sha256 and converted once to a Hugging Face bf16 folder in the
#      model cache (<cache>/hf-models/; the Q4_K_M weights widened to bf16, ~3.5 GB):
#      python -m saber_lib.llm.models to-hf NAME
#   3. the judgments asked through vLLM, one request per call (saber_lib.pipeline.judge_replay)
#   4. the report (saber_lib.pipeline.judge_report, in the default environment)
# Usage: tools/vllm_cpu_compare.sh [--pairs N] [--out FILE]
#   --pairs  the first N pairs recorded in both orders (default: all)
#   --out    the report (default benchmarks/results/vllm_cpu_compare.md)
# Env: PYTHON, VLLM_VENV (the vLLM environment), REPORT_PYTHON (the default environment's python,
# default .venv/bin/python), OMP_NUM_THREADS (default 2), SABER_CACHE_DIR.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
NAME=qwen2.5-coder-1.5b-instruct-q4_k_m
PAIRS=()
OUT=$ROOT/benchmarks/results/vllm_cpu_compare.md
while [ $# -gt 0 ]; do
    case "$1" in
        --pairs) PAIRS=(--pairs "${2:?--pairs needs a value}"); shift ;;
        --out) OUT=${2:?--out needs a value}; shift ;;
        -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
        *) echo "vllm_cpu_compare.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
REPORT_PY=${REPORT_PYTHON:-$ROOT/.venv/bin/python}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}  # vLLM's CPU worker otherwise drops to 1 thread
# shellcheck source=tools/vllm_env.sh
source "$ROOT/tools/vllm_env.sh"
ensure_vllm_venv
cd "$ROOT"
HF_DIR=$("$VENV/bin/python" -m saber_lib.llm.models to-hf "$NAME" | tail -1)
RECORD=$ROOT/runs/vllm_cpu_compare/vllm.jsonl
mkdir -p "$(dirname "$RECORD")"
"$VENV/bin/python" -m saber_lib.pipeline.judge_replay --record "$RECORD" "${PAIRS[@]}" \
    --backend vllm --model "$NAME-bf16" --model-path "$HF_DIR" --max-model-len 2048 \
    --engine-kwargs '{"enforce_eager": true, "dtype": "bfloat16", "seed": 0}'
"$REPORT_PY" -m saber_lib.pipeline.judge_report --other "$RECORD" --out "$OUT" \
    --what "Qwen2.5-Coder-1.5B-Instruct: llama.cpp runs the Q4_K_M GGUF, vLLM (CPU build 0.32.0) its weights dequantized to bf16" \
    --command "tools/vllm_cpu_compare.sh ${PAIRS[*]}" \
    --note "Weights: not bit-identical - llama.cpp computes with the Q4_K_M blocks, vLLM with the same numbers widened to bf16 (transformers' GGUF reader), so margins may differ by quantized-matmul rounding" \
    --note "vLLM scores each option exactly (prompt + option as a prompt, prompt_logprobs); llama.cpp reads the top-20 next-token log-probabilities"
