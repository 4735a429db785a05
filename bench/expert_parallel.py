"""Expert parallelism against replicated experts: the same mixture-of-experts
model trained by the same processes with parallel.ep 1 (every rank holds
every expert) and ep N (each holds 1/N of them), as a Markdown table
(docs/benchmarks.md): tokens/s, and per rank the MiB of weights, gradients
and optimizer state (summary.json's memory_per_rank, rank 0) and rank 0's
peak memory rise.

Every row is a real `gputrain run --nproc-per-node P` on synthetic tokens.
Usage: expert_parallel.py --binary build/gputrain [--nproc 2] [--steps N]
"""
import argparse
import tempfile
from pathlib import Path

from bench_args import add_model_args, launched_run, provenance

RECIPE = """run: {{name: expert-parallel, device: cpu, threads: 1}}
model: {{vocab_size: {vocab}, seq_len: {seq}, n_layer: {layers}, n_head: {heads}, d_model: {d},
        moe: {{experts: {experts}, top_k: 2, every: 1, capacity_factor: 1.25}}}}
data: {{train: {{format: synthetic, synthetic: {{kind: uniform}}}}}}
train: {{per_device_batch_size: {batch}, max_steps: {steps}, log_every: {steps}}}
checkpoint: {{at_end: false}}
metrics: {{progress: off}}
"""


def run(binary, recipe, nproc, ep, out):
    s = launched_run(binary, recipe, nproc, {"parallel.ep": ep}, out)
    rank0 = s["memory_per_rank"][0]
    return (s["tokens_per_s"], rank0["weights_mb"], rank0["grads_mb"], rank0["optimizer_state_mb"],
            s["mem_peak_mb"] - s.get("mem_start_mb", 0.0))


def main():
    ap = add_model_args(argparse.ArgumentParser(), vocab=8192, seq=256, layers=4, heads=4, d=256)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--batch", type=int, default=4)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        recipe = Path(tmp) / "r.yaml"
        recipe.write_text(RECIPE.format(**vars(a)))
        print(provenance(a.binary))
        print(f"model: {a.layers} layers, d_model {a.d}, every block a mixture of {a.experts} experts (top 2, "
              f"capacity 1.25), seq_len {a.seq}, vocab {a.vocab}; {a.nproc} processes (Gloo, 1 thread each) of "
              f"batch {a.batch}, {a.steps} steps\n")
        print("| parallel.ep | experts per rank | tokens/s | weights MiB/rank | gradients MiB/rank | "
              "optimizer MiB/rank | rank 0 peak rise MiB |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        ep = 1
        while ep <= a.nproc:
            if a.nproc % ep == 0 and a.experts % ep == 0:
                tps, w, g, o, peak = run(a.binary, recipe, a.nproc, ep, Path(tmp) / f"ep{ep}")
                print(f"| {ep} | {a.experts // ep} | {tps:,.0f} | {w:.1f} | {g:.1f} | {o:.1f} | {peak:.0f} |")
            ep *= 2


if __name__ == "__main__":
    main()
