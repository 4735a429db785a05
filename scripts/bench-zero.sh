#!/usr/bin/env bash
# Memory per rank under each ZeRO stage (and the step time) for the GPT-2 124M
# shape, 2 data-parallel processes on this machine: prints a Markdown table.
# usage: scripts/bench-zero.sh [NPROC] [extra --set overrides...]
set -euo pipefail
cd "$(dirname "$0")/.."
nproc=${1:-2}
shift || true
bin=build/gputrain
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "| parallel.zero | weights MiB/rank | grads MiB/rank | optimizer state MiB/rank | peak RSS MiB (rank 0) | step ms |"
echo "|---|---|---|---|---|---|"
for zero in 0 1 2; do
  "$bin" run configs/gpt2-124m.yaml --nproc-per-node "$nproc" --output-dir "$work/z$zero" \
    --set parallel.zero=$zero --set model.seq_len=64 --set train.per_device_batch_size=1 \
    --set train.grad_accum_steps=1 --set train.global_batch_size=0 --set train.max_steps=3 --set optim.schedule.warmup_steps=1 --set train.log_every=1 \
    --set checkpoint.at_end=false --set checkpoint.every=0 --set metrics.progress=off \
    "$@" > "$work/z$zero.log" 2>&1 || { cat "$work/z$zero.log"; exit 1; }
  python3 - "$work/z$zero" "$zero" <<'PY'
import json, sys
out, zero = sys.argv[1], sys.argv[2]
s = json.load(open(out + "/summary.json"))
m = s["memory_per_rank"]
lines = [json.loads(l) for l in open(out + "/metrics.jsonl")]
fmt = lambda k: " / ".join(f"{r[k]:.0f}" for r in m)
print(f"| {zero} | {fmt('weights_mb')} | {fmt('grads_mb')} | {fmt('optimizer_state_mb')} | {s['mem_peak_mb']:.0f} | {lines[-1]['step_ms']:.0f} |")
PY
done
