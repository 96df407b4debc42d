#!/usr/bin/env bash
# The micro visual world's table (seed 0; docs/explanation/findings.md) and its three-seed check, on the shipped checkpoints.
#   bash scripts/visual_world.sh [OUT]     # default OUT=results/visual-world; rerun to skip finished runs
# Then: corl-bench table -r OUT --metric greedy,avg_k ; corl-bench probe qwen2vl-micro llava-micro -b micro-visual-test
set -euo pipefail
OUT=${1:-results/visual-world}
CLI=${CORL_BENCH:-$(command -v corl-bench || echo .venv/bin/corl-bench)}
run() {  # run TAG ARGS...: one run, skipped when a finished run with this tag exists
  local tag=$1; shift
  if grep -qs '"status": "finished"' "$OUT"/runs/*-"$tag"-s*/run.json; then echo "done: $tag"; return; fi
  "$CLI" run --output-dir "$OUT/runs" --set "run.tag=$tag" "$@"
}
run gt0     --method gt-reward --cohort visual-single
run corl0   --method corl      --cohort visual-cross-family
run corlsf0 --method corl      --cohort visual-same-family
run ttrl0   --method ttrl      --cohort visual-single
run mmupt0  --method mm-upt    --cohort visual-single --config configs/mm-upt.yaml
for seed in 1 2; do
  run "corl$seed" --method corl --cohort visual-cross-family --seed "$seed"
  run "ttrl$seed" --method ttrl --cohort visual-single --seed "$seed"
done
