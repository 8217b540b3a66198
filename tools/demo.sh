#!/usr/bin/env bash
# Loom's main job end to end on the embedded default, Llama 3 8B over
# dp2 x tp2 x pp2 with 8 micro-batches: plan, search the pipeline order, verify
# the ordered plan, simulate the schedule (SVG Gantt chart), then run 2 training
# steps of the same plan at tiny size on the CPU backend with the reference check.
# Installs what is missing and builds `loom` first. Outputs go to build/demo (or
# $LOOM_DEMO_OUT).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bash tools/build.sh loom
out=${LOOM_DEMO_OUT:-build/demo}
mkdir -p "$out"
loom=build/tools/loom
step() {
  echo
  echo "\$ loom $*"
  "$loom" "$@"
}

model=(--model llama3-8b)
parallel=(--dp 2 --tp 2 --pp 2 --microbatches 8)
step plan "${model[@]}" "${parallel[@]}" -o "$out/plan.json"
# The plan carries the step it was made from: the commands reading it need no model flags.
step search --plan "$out/plan.json" -o "$out/plan.ordered.json" --csv "$out/schedule.csv"
set +e
step verify --plan "$out/plan.ordered.json" --report "$out/report.json" \
  --junit "$out/verify.xml" --cache "$out/proof-cache" | tee "$out/verify.txt"
verdict_code=${PIPESTATUS[0]}
set -e
step simulate "$out/schedule.csv" --gantt "$out/schedule.svg"

# A low clipping threshold, so that the check also covers the gradient norm.
tiny=("${model[@]}" --tiny --max-grad-norm 0.01)
step plan "${tiny[@]}" "${parallel[@]}" -o "$out/tiny.json"
step search --plan "$out/tiny.json" -o "$out/tiny.ordered.json"
step run "$out/tiny.ordered.json" --steps 2 --check

verdict=$(sed -n 's/^verdict: *//p' "$out/verify.txt")
echo
echo "llama3-8b, dp2 x tp2 x pp2, 8 micro-batches, searched order: ${verdict:-no verdict}"
echo "report:   $out/report.json (JUnit: $out/verify.xml)"
echo "schedule: $out/schedule.svg"
exit "$verdict_code"
