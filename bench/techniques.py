"""The single-device techniques on one model: tokens/s and peak memory for
each precision mode, activation checkpointing policy and attention kernel,
alone and combined, as a Markdown table (docs/benchmarks.md).

Every row is a real `gputrain run` of the same recipe with --set overrides.
Memory is the rise of the process's peak (CPU: resident set above what it
held before the model existed; CUDA: the caching allocator's peak), next to
`gputrain plan`'s estimate. Usage: techniques.py --binary build/gputrain [--device cpu|cuda] [--steps N]
"""
import argparse
import json
import subprocess
import tempfile
from pathlib import Path

from bench_args import add_model_args, provenance

RECIPE = """run: {{name: techniques, device: {device}}}
model: {{vocab_size: {vocab}, seq_len: {seq}, n_layer: {layers}, n_head: {heads}, d_model: {d}}}
data: {{train: {{format: synthetic, synthetic: {{kind: uniform}}}}, num_workers: 2}}
train: {{per_device_batch_size: {batch}, max_steps: {steps}, log_every: {steps}}}
metrics: {{progress: off}}
"""

ROWS = [
    ("fp32", []),
    ("tf32", ["precision.mode=tf32"]),
    ("bf16 mixed", ["precision.mode=bf16"]),
    ("fp16 mixed + loss scaling", ["precision.mode=fp16"]),
    ("bf16-pure", ["precision.mode=bf16-pure"]),
    ("fp32 + selective checkpointing (every 2nd block)", ["train.gradient_checkpointing=selective"]),
    ("fp32 + full checkpointing", ["train.gradient_checkpointing=full"]),
    ("fp32 + math attention", ["model.attention=math"]),
    ("bf16 mixed + full checkpointing", ["precision.mode=bf16", "train.gradient_checkpointing=full"]),
    ("bf16-pure + full checkpointing", ["precision.mode=bf16-pure", "train.gradient_checkpointing=full"]),
]


def run(binary, recipe, sets, out):
    args = [binary, "run", str(recipe), "--output-dir", str(out), "--overwrite"]
    for s in sets:
        args += ["--set", s]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    s = json.loads((out / "summary.json").read_text())
    plan = subprocess.run([binary, "plan", str(recipe)] + sum([["--set", x] for x in sets], []),
                          check=True, capture_output=True, text=True).stdout
    estimate = float(plan.split("| total (estimate) | ")[1].split(" ")[0])
    mem = s["mem_peak_mb"] - s.get("mem_start_mb", 0.0)
    return s["tokens_per_s"], mem, estimate


def main():
    ap = add_model_args(argparse.ArgumentParser(), vocab=8192, seq=256, layers=4, heads=4, d=256)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--batch", type=int, default=8)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        recipe = Path(tmp) / "r.yaml"
        recipe.write_text(RECIPE.format(device=a.device, vocab=a.vocab, seq=a.seq, layers=a.layers, heads=a.heads,
                                        d=a.d, batch=a.batch, steps=a.steps))
        print(provenance(a.binary))
        print(f"model: {a.layers} layers, d_model {a.d}, {a.heads} heads, seq_len {a.seq}, vocab {a.vocab}; "
              f"batch {a.batch}; {a.steps} steps on {a.device}\n")
        print("| technique | tokens/s | vs fp32 | peak memory MiB | vs fp32 | plan estimate MiB |")
        print("|---|---:|---:|---:|---:|---:|")
        base = None
        for name, sets in ROWS:
            tps, mem, est = run(a.binary, recipe, sets, Path(tmp) / "out")
            base = base or (tps, mem)
            print(f"| {name} | {tps:,.0f} | {tps / base[0]:.2f}x | {mem:,.0f} | {mem / base[1]:.2f}x | {est:,.0f} |",
                  flush=True)


if __name__ == "__main__":
    main()
