#!/usr/bin/env bash
# vLLM rollouts + GRPO updates for two agents colocated on ONE GPU, beside TRL GRPOTrainer with vLLM colocate on the
# same model and settings, then the vLLM image test. Budget: <= 10 minutes. Needs CUDA and `pip install vllm trl` in the environment.
#
#   bash scripts/gpu_vllm_check.sh            # uses .venv/bin/python, or PY=python bash ...
#
# Settings (both sides): SmolLM2-135M-Instruct in bf16, 8 prompts x 8 samples x 256 tokens, T = 1, no KL, lr 5e-5,
# token-mean loss, no gradient checkpointing. Memory fractions, stated: each corl-bench agent's vLLM engine takes
# gpu_memory_utilization 0.20 of the GPU (two agents: 0.40), training takes what is left; TRL's colocated vLLM takes
# 0.20. corl-bench: `corl-bench run` of Co-RL on smol-same-family (two SmolLM2 agents, one process, agents one after
# another on the one GPU), 3 steps; TRL: bench_suite's TRL worker, 1 warm-up + 2 timed steps of one model (TRL trains
# one model per job: two agents cost two of its steps). Prints the step times, rollout tokens/s, the weight-sync
# route and peak GPU memory. Exits 2 with one line when CUDA or vLLM is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 2)" \
  || { echo "gpu_vllm_check: no CUDA device visible; run this on a GPU machine" >&2; exit 2; }
"$PY" -c "import vllm, trl" 2>/dev/null || { echo "gpu_vllm_check: needs vllm and trl: $PY -m pip install vllm trl" >&2; exit 2; }
OUT=$(mktemp -d /tmp/corl-gpu-vllm-XXXX)
SETS=(--set model.dtype=bfloat16 --set model.device=cuda --set rollout.prompts_per_step=8 --set rollout.samples_per_prompt=8
      --set rollout.max_new_tokens=256 --set data.train=arith-1digit)
echo "== corl-bench: Co-RL x smol-same-family, rollout.backend=vllm (gpu_memory_utilization 0.20 per agent)"
timeout 300 "$PY" -m corl_bench.cli run --method corl --cohort smol-same-family --steps 3 --output-dir "$OUT" --run-id corl \
  "${SETS[@]}" --set rollout.backend=vllm --set "rollout.engine_options={gpu_memory_utilization: 0.2}" \
  --set eval.before=false --set eval.max_problems=8 --set run.checkpoint_every=0 --set run.save_checkpoints=false \
  > "$OUT/corl.log" 2>&1 || { tail -20 "$OUT/corl.log"; exit 1; }
"$PY" - "$OUT/corl" <<'PYEOF'
import json, sys
from pathlib import Path
rows = [json.loads(l) for l in (Path(sys.argv[1]) / "metrics.jsonl").read_text().splitlines() if l.strip()]
rows = [r for r in rows if "event" not in r]
for step in sorted({r["step"] for r in rows}):
    mine = [r for r in rows if r["step"] == step]
    t = {k[5:]: round(v, 2) for k, v in mine[0].items() if k.startswith("time/")}
    toks = sum(r["len/mean"] * 8 * 8 for r in mine)
    print(f"corl-bench step {step}: {sum(t.values()):.2f} s for 2 agents {json.dumps(t)}; rollout "
          f"{toks / max(t.get('rollout', 1e-9), 1e-9):.0f} tok/s (both agents)")
PYEOF
grep -i "route\|settled\|peak" "$OUT/corl.log" | head -5 || true
echo "== TRL GRPOTrainer, vLLM colocate (vllm_gpu_memory_utilization 0.20), one model"
timeout 170 "$PY" scripts/bench_suite.py --worker step --side trl --model smol --steps 2 --threads 4 --tmp "$OUT/trl" \
  --trl-vllm 0.2 --set model.dtype=bfloat16 --set model.device=cuda --set rollout.prompts_per_step=8 \
  --set rollout.samples_per_prompt=8 --set rollout.max_new_tokens=256 | tail -1
echo "== vLLM with images: a tiny Qwen2.5-VL, engine log-probs vs the training forward with images (never run on a CPU)"
timeout 240 "$PY" -m pytest -q -rs -p no:cacheprovider tests/test_vllm_engine.py -k images 2>&1 | tail -3 || true
echo "gpu_vllm_check: outputs in $OUT"
