"""The longest Llama 3.1 8B sequence that fits 80 GiB per GPU, by `gputrain plan`, on 8 and 64 GPUs
with parallel.cp from 1 up by each parallel.cp_method (ZeRO-3 over the other ranks, bf16 mixed precision, full activation
checkpointing, one sequence per rank), as a Markdown table (docs/benchmarks.md). The plan's
per-rank total (ZeRO-3's shards and three units' whole tensors, activations, logits) is an estimate:
real runs add the framework's memory and allocator slack.

Usage: context_parallel_plan.py --binary build/gputrain [--gib 80] [--methods allgather,ring]
"""
import argparse
import re
import subprocess

LLAMA_31_8B = {
    "model.arch": "llama", "model.vocab_size": 128256, "model.n_layer": 32, "model.d_model": 4096,
    "model.n_head": 32, "model.n_kv_head": 8, "model.mlp_width": 14336, "model.rope_theta": 500000,
    "model.tie_embeddings": "false", "precision.mode": "bf16", "train.gradient_checkpointing": "full",
    "train.per_device_batch_size": 1, "parallel.zero": 3, "run.device": "cuda",
}


def rank_mib(binary, world, cp, seq, method):
    sets = {**LLAMA_31_8B, "parallel.cp": cp, "parallel.cp_method": method, "model.seq_len": seq}
    args = [binary, "plan", "--world-size", str(world)]
    for key, value in sets.items():
        args += ["--set", f"{key}={value}"]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    total = float(re.search(r"one rank with micro-batch 1 \(.*\): ([0-9.]+) MiB", out).group(1))
    activations = float(re.search(r"\| activations \| ([0-9.]+) \|", out).group(1))
    return total, activations


LIMIT = 1 << 20  # model.seq_len's largest value


def longest(binary, world, cp, method, budget_mib):
    """The largest seq_len (a multiple of 2 cp x 1024, at most LIMIT) whose plan fits the budget."""
    step = 2 * cp * 1024
    lo, hi = 0, step
    while rank_mib(binary, world, cp, hi, method)[0] <= budget_mib:
        if hi == LIMIT:
            return LIMIT
        lo, hi = hi, min(hi * 2, LIMIT)
    while hi - lo > step:
        mid = (lo + hi) // 2 // step * step
        if rank_mib(binary, world, cp, mid, method)[0] <= budget_mib:
            lo = mid
        else:
            hi = mid
    return lo


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="build/gputrain")
    ap.add_argument("--gib", type=float, default=80)
    ap.add_argument("--worlds", default="8,64")
    ap.add_argument("--methods", default="allgather,ring")
    a = ap.parse_args()
    print(subprocess.run([a.binary, "--version"], capture_output=True, text=True).stdout.strip())
    print(f"Llama 3.1 8B, ZeRO-3 over every rank, bf16 mixed, full checkpointing, batch 1; budget {a.gib:g} GiB "
          "per GPU (the plan's estimate)\n")
    print("| GPUs | parallel.cp | cp_method | longest seq_len | tokens per rank | rank total MiB | "
          "of which activations MiB |")
    print("|---:|---:|---|---:|---:|---:|---:|")
    for world in (int(w) for w in a.worlds.split(",")):
        cp = 1
        while cp <= world:
            for method in a.methods.split(",") if cp > 1 else ["allgather"]:
                seq = longest(a.binary, world, cp, method, a.gib * 1024)
                total, act = rank_mib(a.binary, world, cp, seq, method) if seq else (0.0, 0.0)
                shown = f"{seq:,}" + (" (the key's limit)" if seq == LIMIT else "")
                print(f"| {world} | {cp} | {method if cp > 1 else '-'} | {shown} | {seq // cp:,} | {total:,.0f} | "
                      f"{act:,.0f} |", flush=True)
            cp *= 2

if __name__ == "__main__":
    main()
