"""Context parallelism against whole sequences: the same model trained with parallel.cp 1, 2 and 4
(each sequence split over that many processes, by each parallel.cp_method) at growing seq_len, as a Markdown table
(docs/benchmarks.md): the median step time after the first, rank 0's peak resident memory above its start (RSS,
measured by the kernel, not by the code) and the plan's activation estimate.

Every row is a real `gputrain run --nproc-per-node cp` on synthetic tokens (one sequence per step).
Usage: context_parallel.py --binary build/gputrain [--seqs 1024,2048,4096] [--cps 1,2,4]
       [--methods allgather,ring] [--steps N]
"""
import argparse
import json
import statistics
import re
import subprocess
import tempfile
from pathlib import Path

from bench_args import add_model_args, launched_run, provenance

RECIPE = """run: {{name: context-parallel, device: cpu, threads: 1}}
model: {{arch: llama, vocab_size: {vocab}, seq_len: {seq}, n_layer: {layers}, n_head: {heads}, n_kv_head: 2,
        d_model: {d}}}
data: {{train: {{format: synthetic, synthetic: {{kind: uniform}}}}}}
train: {{per_device_batch_size: 1, max_steps: {steps}, log_every: 1}}
checkpoint: {{at_end: false}}
metrics: {{progress: off}}
"""


def planned_activations(binary, recipe, cp, seq, method):
    """The plan's activations of one micro-batch on one rank (MiB)."""
    out = subprocess.run([binary, "plan", str(recipe), "--world-size", str(cp), "--set", f"parallel.cp={cp}",
                          "--set", f"parallel.cp_method={method}", "--set", f"model.seq_len={seq}"],
                         capture_output=True, text=True, check=True).stdout
    return float(re.search(r"\| activations \| ([0-9.]+) \|", out).group(1))


def step_ms(out):
    """The median step time after the first step (which warms up), from metrics.jsonl."""
    lines = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines() if l.strip()]
    return statistics.median(r["step_ms"] for r in lines[1:])


def main():
    ap = add_model_args(argparse.ArgumentParser(), vocab=4096, seq=0, layers=4, heads=8, d=256)
    ap.add_argument("--seqs", default="1024,2048,4096")
    ap.add_argument("--cps", default="1,2,4")
    ap.add_argument("--methods", default="allgather,ring")
    ap.add_argument("--steps", type=int, default=5)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print(provenance(a.binary))
        print(f"model: Llama, {a.layers} layers, d_model {a.d}, {a.heads} heads over 2 key/value heads, vocab {a.vocab}; "
              f"one sequence per step, fp32, {a.steps} steps; cp processes (Gloo, 1 thread each) on this machine\n")
        print("| seq_len | parallel.cp | cp_method | tokens per rank | step ms | rank 0 peak RSS rise MiB | "
              "plan: activations per rank MiB |")
        print("|---:|---:|---|---:|---:|---:|---:|")
        for seq in (int(s) for s in a.seqs.split(",")):
            recipe = Path(tmp) / f"r{seq}.yaml"
            recipe.write_text(RECIPE.format(**{**vars(a), "seq": seq}))
            for cp in (int(c) for c in a.cps.split(",")):
                for method in a.methods.split(",") if cp > 1 else ["-"]:
                    sets = {"parallel.cp": cp, **({"parallel.cp_method": method} if cp > 1 else {})}
                    out = Path(tmp) / f"s{seq}-cp{cp}-{method}"
                    s = launched_run(a.binary, recipe, cp, sets, out)
                    rise = s["mem_peak_mb"] - s.get("mem_start_mb", 0.0)
                    planned = planned_activations(a.binary, recipe, cp, seq, "allgather" if cp == 1 else method)
                    print(f"| {seq} | {cp} | {method} | {seq // cp} | {step_ms(out):,.0f} | {rise:.0f} | "
                          f"{planned:.0f} |", flush=True)

if __name__ == "__main__":
    main()
