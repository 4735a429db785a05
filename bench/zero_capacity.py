"""The largest GPT whose training state fits a memory budget per rank under each ZeRO stage, by
`gputrain plan --world-size N` (what each rank holds between steps: weights, gradients and AdamW
state, plus under ZeRO-3 two gathered units; activations are not counted: they depend on the
batch and checkpointing, and shrink with them). A Markdown table (docs/benchmarks.md).

The models are GPT-2 shaped: n_layer layers of width d_model (n_head = d_model / 128), vocabulary
50304, seq_len 2048; the search widens d_model in steps of 256 at the given depth.
Usage: zero_capacity.py --binary build/gputrain [--world 8] [--budget-gib 80] [--layers 48]
"""
import argparse
import re
import subprocess
import tempfile
from pathlib import Path

from bench_args import provenance

RECIPE = """run: {name: capacity}
model: {vocab_size: 50304, seq_len: 2048, n_layer: 48, n_head: 8, d_model: 1024}
data: {train: {format: synthetic, synthetic: {kind: uniform}}}
train: {per_device_batch_size: 1, max_steps: 1}
"""


def per_rank_mib(binary, recipe, world, zero, layers, d):
    out = subprocess.run([binary, "plan", str(recipe), "--world-size", str(world), "--set", f"parallel.zero={zero}",
                          "--set", f"model.n_layer={layers}", "--set", f"model.d_model={d}", "--set",
                          f"model.n_head={d // 128}"], check=True, capture_output=True, text=True).stdout
    params = int(re.search(r"parameters: (\d+)", out).group(1))
    table = out[out.index("memory per rank between steps"):]
    cells = [float(c) for c in re.search(r"\n\| 0 \|([^\n]*)\|", table).group(1).split("|")]
    held = cells[3] + (2 * cells[4] if zero == 3 else 0)  # sum, plus two gathered units
    return params, cells, held


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="build/gputrain")
    ap.add_argument("--world", type=int, default=8)
    ap.add_argument("--budget-gib", type=float, default=80)
    ap.add_argument("--layers", type=int, default=48)
    a = ap.parse_args()
    budget = a.budget_gib * 1024
    with tempfile.TemporaryDirectory() as tmp:
        recipe = Path(tmp) / "r.yaml"
        recipe.write_text(RECIPE)
        print(provenance(a.binary))
        print(f"{a.world} ranks, {a.budget_gib:g} GiB each for training state; fp32 weights, AdamW; "
              f"{a.layers} layers, vocabulary 50304\n")
        print("| parallel.zero | largest d_model | parameters | weights GiB/rank | gradients GiB/rank | "
              "optimizer GiB/rank | gathered units GiB | total GiB/rank |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
        for zero in range(4):
            best = None
            d = 256
            while True:
                params, cells, held = per_rank_mib(a.binary, recipe, a.world, zero, a.layers, d)
                if held > budget:
                    break
                best = (d, params, cells, held)
                d += 256
            if best is None:
                print(f"| {zero} | none | - | - | - | - | - | - |")
                continue
            d, params, cells, held = best
            units = 2 * cells[4] / 1024 if zero == 3 else 0
            print(f"| {zero} | {d} | {params / 1e9:.1f}B | {cells[0] / 1024:.1f} | {cells[1] / 1024:.1f} | "
                  f"{cells[2] / 1024:.1f} | {units:.1f} | {held / 1024:.1f} |")


if __name__ == "__main__":
    main()
