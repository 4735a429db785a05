"""What checkpoints cost a parallel run: the same GPT trained by the same processes without
checkpoints, with a synchronous save every K steps and with checkpoint.async, as a Markdown table
(docs/benchmarks.md): the run's wall time, the time the saves added to it, and the files each rank
wrote (each rank writes its own part: ZeRO-3 its rows of everything, ZeRO-0 the first replica).

Every row is a real `gputrain run --nproc-per-node P` on synthetic tokens.
Usage: checkpoint_saves.py --binary build/gputrain [--nproc 2] [--steps N] [--every K]
"""
import argparse
import json
import tempfile
import time
from pathlib import Path

from bench_args import add_model_args, launched_run, provenance

RECIPE = """run: {{name: checkpoint-saves, device: cpu, threads: 1}}
model: {{vocab_size: {vocab}, seq_len: {seq}, n_layer: {layers}, n_head: {heads}, d_model: {d}}}
data: {{train: {{format: synthetic, synthetic: {{kind: uniform}}}}}}
train: {{per_device_batch_size: {batch}, max_steps: {steps}, log_every: {steps}}}
checkpoint: {{keep_last: 2}}
metrics: {{progress: off}}
"""


def run(binary, recipe, nproc, sets, out):
    start = time.monotonic()
    launched_run(binary, recipe, nproc, sets, out)
    wall = time.monotonic() - start
    newest = sorted((out / "checkpoints").glob("step_*"))
    sizes = {}
    if newest:
        for name, f in json.loads((newest[-1] / "manifest.json").read_text())["files"].items():
            if name.startswith(("model.", "optimizer.")):
                rank = name.split(".")[1]
                sizes[rank] = sizes.get(rank, 0) + f["bytes"]
    return wall, sizes


def main():
    ap = add_model_args(argparse.ArgumentParser(), vocab=8192, seq=128, layers=6, heads=8, d=512)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--every", type=int, default=2)
    ap.add_argument("--batch", type=int, default=1)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        recipe = Path(tmp) / "r.yaml"
        recipe.write_text(RECIPE.format(**vars(a)))
        print(provenance(a.binary))
        print(f"model: {a.layers} layers, d_model {a.d}, seq_len {a.seq}, vocab {a.vocab}, AdamW, fp32; {a.nproc} "
              f"processes (Gloo, 1 thread each) of batch {a.batch}, {a.steps} steps, a checkpoint every {a.every} "
              f"steps into a local disk\n")
        print("| parallel.zero | checkpoints | wall s | added by saves, s | per save, s | MiB written per rank (newest) |")
        print("|---:|---|---:|---:|---:|---|")
        saves = a.steps // a.every
        for zero in (0, 3):
            base = None
            for label, sets in (("none", {"checkpoint.at_end": "false"}),
                                ("synchronous", {"checkpoint.every": a.every}),
                                ("async", {"checkpoint.every": a.every, "checkpoint.async": "true"})):
                sets = dict(sets, **{"parallel.zero": zero})
                wall, sizes = run(a.binary, recipe, a.nproc, sets, Path(tmp) / f"z{zero}-{label}")
                if base is None:
                    base = wall
                    print(f"| {zero} | none | {wall:.1f} | - | - | - |")
                    continue
                written = ", ".join(f"{r}: {b / 2**20:.0f}" for r, b in sorted(sizes.items()))
                print(f"| {zero} | {label} | {wall:.1f} | {wall - base:.1f} | {(wall - base) / saves:.2f} | {written} |")


if __name__ == "__main__":
    main()
