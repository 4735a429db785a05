#!/usr/bin/env bash
# Pipeline parallelism on this machine (Gloo, one process per stage): for each
# schedule, every stage's blocks, the micro-batches whose activations it held
# at its peak, the memory those took (malloc's bytes in use above the step's
# start: activations and what backward keeps for them), and the bubble
# fraction for the configured micro-batches. Prints a Markdown table.
# usage: scripts/bench-pipeline.sh [PP] [MICRO_BATCHES] [extra --set overrides...]
set -euo pipefail
cd "$(dirname "$0")/.."
pp=${1:-4}
micro=${2:-8}
shift 2 || true
bin=build/gputrain
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/r.yaml" <<YAML
run: {name: pipeline-bench, threads: 1}
model: {vocab_size: 4096, seq_len: 256, n_layer: 8, n_head: 4, d_model: 256}
data: {train: {format: synthetic, synthetic: {kind: uniform}}}
train: {per_device_batch_size: 2, grad_accum_steps: $micro, max_steps: 3, log_every: 1}
optim: {schedule: {warmup_steps: 1}}
checkpoint: {at_end: false, every: 0}
metrics: {progress: off}
YAML
echo "pp $pp, $micro micro-batches of 2 x 256 tokens; model 8 x d_model 256, vocab 4096, fp32"
echo
echo "| schedule | stage | blocks | micro-batches held | activation memory MiB | bubble | step ms |"
echo "|---|---|---|---:|---:|---:|---:|"
for schedule in gpipe 1f1b; do
  "$bin" run "$work/r.yaml" --nproc-per-node "$pp" --output-dir "$work/$schedule" \
    --set parallel.pp=$pp --set parallel.pp_schedule=$schedule "$@" > "$work/$schedule.log" 2>&1 \
    || { cat "$work/$schedule.log"; exit 1; }
  python3 - "$work/$schedule" "$schedule" <<'PY'
import json, sys
out, schedule = sys.argv[1], sys.argv[2]
s = json.load(open(out + "/summary.json"))
lines = [json.loads(l) for l in open(out + "/metrics.jsonl")]
blocks = [f"{a}-{b - 1}" for a, b in s["pipeline"]["stage_blocks"]]
bubble = s["pipeline"]["bubble_fraction"]
for r in s["memory_per_rank"]:
    print(f"| {schedule} | {r['stage']} | {blocks[r['stage']]} | {r['micro_batches_held']} | "
          f"{r['activations_mb']:.0f} | {100 * bubble:.1f}% | {lines[-1]['step_ms']:.0f} |")
PY
done
