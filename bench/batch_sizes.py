"""Tokens/s and peak memory against the micro-batch size (the seed guide's
table: fp32 / tf32 / fp16 / bf16 (and bf16-pure), gradient checkpointing off
and on, batch sizes 8..64), as a Markdown table (docs/benchmarks.md).

Each cell is a real `gputrain run` of the same recipe with --set overrides.
Throughput is the second half of the steps (metrics.jsonl's last line; the
first half holds the warm-up: allocator growth, cuBLAS heuristics); memory is
the peak (CUDA: the caching allocator's; CPU: resident set above the start).
A run that does not fit shows "OOM".
Usage: batch_sizes.py --binary build/gputrain [--device cuda] [--batches 8,16,32,64] [--steps N]
                      [--modes fp32,tf32,fp16,bf16,bf16-pure] [--checkpointing none,full]
"""
import argparse
import json
import subprocess
import tempfile
from pathlib import Path

from bench_args import add_model_args, provenance
from techniques import RECIPE  # the same model and data recipe as the techniques table

# precision.mode -> the table's name for it (the seed guide's fp32 / tf32 / fp16 / bf16, and bf16-pure).
MODES = {
    "fp32": "fp32",
    "tf32": "fp32 (tf32 matmuls)",
    "fp16": "fp16 mixed + loss scaling",
    "bf16": "bf16 mixed",
    "bf16-pure": "bf16-pure",
}


def rows(modes, checkpointing):
    """(name, --set overrides) for each precision mode, with each checkpointing policy."""
    for mode in modes:
        if mode not in MODES:
            raise SystemExit(f"--modes: unknown precision mode {mode!r} (one of {', '.join(MODES)})")
        for policy in checkpointing:
            sets = [f"precision.mode={mode}", f"train.gradient_checkpointing={policy}"]
            yield MODES[mode] + ("" if policy == "none" else f" + {policy} checkpointing"), sets


def run(binary, recipe, sets, out, steps):
    args = [binary, "run", str(recipe), "--output-dir", str(out), "--overwrite", "--set", f"train.log_every={steps // 2}"]
    for s in sets:
        args += ["--set", s]
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        if "out of memory" in r.stdout.lower():
            return None
        raise SystemExit(f"gputrain failed ({r.returncode}):\n{r.stdout[-2000:]}")
    last = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()][-1]
    s = json.loads((out / "summary.json").read_text())
    return last["tokens_per_s"], s["mem_peak_mb"] - s.get("mem_start_mb", 0.0), last.get("mfu")


def main():
    ap = add_model_args(argparse.ArgumentParser(), vocab=50304, seq=1024, layers=12, heads=12, d=768)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batches", default="8,16,32,64")
    ap.add_argument("--modes", default=",".join(MODES), help="precision modes, comma-separated")
    ap.add_argument("--checkpointing", default="none,full", help="train.gradient_checkpointing policies")
    a = ap.parse_args()
    batches = [int(b) for b in a.batches.split(",")]
    table = list(rows(a.modes.split(","), a.checkpointing.split(",")))
    print(provenance(a.binary))
    print(f"model: {a.layers} layers, d_model {a.d}, {a.heads} heads, seq_len {a.seq}, vocab {a.vocab}; "
          f"{a.steps} steps on {a.device}, the second half timed\n")
    print("| technique | batch | tokens/s | MFU | peak memory MiB |")
    print("|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, sets in table:
            for b in batches:
                recipe = Path(tmp) / "r.yaml"
                recipe.write_text(RECIPE.format(device=a.device, vocab=a.vocab, seq=a.seq, layers=a.layers,
                                                heads=a.heads, d=a.d, batch=b, steps=a.steps))
                got = run(a.binary, recipe, sets, Path(tmp) / "out", a.steps)
                if got is None:
                    print(f"| {name} | {b} | OOM | - | - |", flush=True)
                    continue
                tps, mem, mfu = got
                mfu_s = f"{100 * mfu:.1f}%" if mfu is not None else "-"
                print(f"| {name} | {b} | {tps:,.0f} | {mfu_s} | {mem:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
