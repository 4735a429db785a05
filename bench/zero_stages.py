"""ZeRO stages side by side: the same GPT trained by the same processes under parallel.zero
0, 1, 2 and 3, as a Markdown table (docs/benchmarks.md): tokens/s and step time, and per rank
the MiB of weights, gradients and optimizer state held between steps (summary.json's
memory_per_rank, rank 0), rank 0's peak memory rise, and under ZeRO-3 the gathers per step and
the milliseconds a step waited for them (summary.json's zero3).

Every row is a real `gputrain run --nproc-per-node P` on synthetic tokens.
Usage: zero_stages.py --binary build/gputrain [--nproc 2 4] [--steps N]
"""
import argparse
import json
import tempfile
from pathlib import Path

from bench_args import add_model_args, launched_run, provenance

RECIPE = """run: {{name: zero-stages, device: cpu, threads: 1}}
model: {{vocab_size: {vocab}, seq_len: {seq}, n_layer: {layers}, n_head: {heads}, d_model: {d}}}
data: {{train: {{format: synthetic, synthetic: {{kind: uniform}}}}}}
train: {{per_device_batch_size: {batch}, max_steps: {steps}, log_every: {steps}}}
checkpoint: {{at_end: false}}
metrics: {{progress: off}}
"""


def run(binary, recipe, nproc, zero, out):
    s = launched_run(binary, recipe, nproc, {"parallel.zero": zero}, out)
    last = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    rank0 = s["memory_per_rank"][0]
    z = s.get("zero3") or {}
    return (s["tokens_per_s"], last["step_ms"], rank0["weights_mb"], rank0["grads_mb"], rank0["optimizer_state_mb"],
            s["mem_peak_mb"] - s.get("mem_start_mb", 0.0), z.get("gathers_per_step"), z.get("gather_wait_ms_per_step"))


def main():
    ap = add_model_args(argparse.ArgumentParser(), vocab=8192, seq=256, layers=6, heads=4, d=256)
    ap.add_argument("--nproc", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch", type=int, default=2)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        recipe = Path(tmp) / "r.yaml"
        recipe.write_text(RECIPE.format(**vars(a)))
        print(provenance(a.binary))
        print(f"model: {a.layers} layers, d_model {a.d}, seq_len {a.seq}, vocab {a.vocab}, AdamW, fp32; processes "
              f"(Gloo, 1 thread each) of batch {a.batch}, {a.steps} steps\n")
        print("| processes | parallel.zero | tokens/s | step ms | weights MiB/rank | gradients MiB/rank | "
              "optimizer MiB/rank | rank 0 peak rise MiB | gathers/step | gather wait ms/step |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for nproc in a.nproc:
            for zero in range(4):
                tps, ms, w, g, o, peak, gathers, wait = run(a.binary, recipe, nproc, zero, Path(tmp) / f"z{nproc}{zero}")
                extra = f"{gathers:g} | {wait:.1f}" if gathers is not None else "- | -"
                print(f"| {nproc} | {zero} | {tps:,.0f} | {ms:.0f} | {w:.1f} | {g:.1f} | {o:.1f} | {peak:.0f} | {extra} |")


if __name__ == "__main__":
    main()
