#!/usr/bin/env bash
# The one GPU check (scripts/gpu_check.py): a bf16 2-agent Co-RL cell of SmolLM2-135M-Instruct x Gemma-3-270M,
# the same cell with vLLM on Ray in run.placement=timeshare (weight sync after each wake checked by the
# engine-vs-trainer log-prob gap), one GRPO step
# against TRL GRPOTrainer + vLLM colocate at equal work, peak memory per agent; ONE JSON. Budget: <= 10 minutes on
# one GPU (each stage has its own budget inside).
#
#   bash scripts/gpu_check.sh --out gpu-check.json     # needs CUDA; make install; pip install vllm trl
#   bash scripts/gpu_check.sh --dry-run --out dry.json # every stage on the CPU at the tiniest size (tests run this)
#
# Uses .venv/bin/python (make install first), or PY=python bash ... Exits 2 with one line when no CUDA device is
# visible (without --dry-run), 1 when a stage that ran is not ok.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
exec timeout 600 "$PY" scripts/gpu_check.py "$@"
