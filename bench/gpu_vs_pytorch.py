#!/usr/bin/env python3
"""GPU training throughput: gputrain vs PyTorch eager and torch.compile, same GPU, same run.

GPT-2 124M (12 layers, d 768, 12 heads, seq 1024, vocab 50304), bf16 autocast
with fp32 master weights, fused AdamW, SDPA (flash) attention, gradient
clipping at 1.0, uniform random tokens generated on the device. Each side
times `--steps` steps after `--warmup` steps (torch.compile's compilation is in
the warm-up; gputrain+graphs, gputrain with kernels.cuda_graphs, captures its
step in it). Prints a Markdown table: tokens/s, step ms, MFU and peak memory.

MFU = tokens/s x FLOPs/token / peak, FLOPs/token = 6 N + 12 L T d (N: all
parameters but the position embedding; the attention term is PaLM's appendix
B one, QK^T and AV at full T x T, as nanoGPT and `gputrain plan` count), peak = the device's dense bf16 rate from PEAK_TFLOPS (no MFU for
an unknown device).
Run: python3 bench/gpu_vs_pytorch.py --binary build/gputrain [--batch 16]
With --profile DIR it times nothing: it profiles 3 steps of gputrain
(metrics.profile_at), of gputrain with kernels.cuda_graphs (replayed steps) and of
PyTorch eager (torch.profiler) and writes DIR/gputrain-ops.md,
DIR/gputrain-graphs-ops.md and DIR/eager-ops.md, kernel by kernel, in one format.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from bench_args import add_model_args, provenance
from cpu_vs_pytorch import GPT, timed_ms  # the CPU benchmark's reference model and step timing

PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0}
# The gputrain sides and their extra --set overrides; the PyTorch sides and whether they compile.
GPUTRAIN_SIDES = {"gputrain": [], "gputrain+graphs": ["kernels.cuda_graphs=true"]}
PYTORCH_SIDES = {"eager": False, "compile": True}
SIDES = [*GPUTRAIN_SIDES, *PYTORCH_SIDES]


def peak_tflops():
    name = torch.cuda.get_device_name()
    return next((v for k, v in PEAK_TFLOPS.items() if k in name), None)


def flops_per_token(L, d, T, V):
    n = 12 * L * d * d + 13 * L * d + V * d + 2 * d  # blocks + tied embedding + final LayerNorm
    return 6 * n + 12 * L * T * d


def ops_table(prof, steps, wall_ms):
    """The same table as gputrain's profile/ops.md (metrics/step_profiler.cpp): device time per kernel."""
    rows = {}
    for e in prof.profiler.kineto_results.events():
        if e.device_type() != torch.autograd.DeviceType.CPU:
            r = rows.setdefault(e.name(), [0, 0.0])
            r[0] += 1
            r[1] += e.duration_ns()
    total = sum(r[1] for r in rows.values())
    out = [f"# Profile of {steps} steps\n", f"- wall time: {wall_ms / steps:.2f} ms per step",
           f"- device time (kernels and copies, summed): {total / 1e6 / steps:.2f} ms per step, "
           f"{100 * total / 1e6 / wall_ms:.0f}% of the wall time",
           "\n| kernel or copy | calls per step | ms per step | share |", "|---|---:|---:|---:|"]
    for name, (calls, ns) in sorted(rows.items(), key=lambda kv: -kv[1][1])[:40]:
        out.append(f"| {name[:107] + '...' if len(name) > 110 else name} | {calls / steps:.1f} | "
                   f"{ns / 1e6 / steps:.3f} | {100 * ns / total:.1f}% |")
    return "\n".join(out) + "\n"


def bench_pytorch(L, H, d, T, B, V, steps, warmup, compile_model, profile_dir=None):
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    model = GPT(L, H, d, T, V).cuda()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and not n.startswith(("wte", "wpe"))]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and not n.startswith(("wte", "wpe")))]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), fused=True)
    fwd = torch.compile(model) if compile_model else model
    torch.cuda.reset_peak_memory_stats()
    start = None
    prof = None
    for step in range(warmup + steps):
        if step == warmup:
            torch.cuda.synchronize()
            if profile_dir:
                prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                          torch.profiler.ProfilerActivity.CUDA])
                prof.__enter__()
            start = time.perf_counter()
        tokens = torch.randint(0, V, (B, T + 1), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    if prof:
        prof.__exit__(None, None, None)
        name = "compile" if compile_model else "eager"
        with open(os.path.join(profile_dir, f"{name}-ops.md"), "w") as f:
            f.write(ops_table(prof, steps, 1000 * seconds))
    peak = torch.cuda.max_memory_allocated() / 2**20
    del model, opt, fwd
    torch.cuda.empty_cache()
    return steps * B * T / seconds, 1000 * seconds / steps, peak


def bench_gputrain(binary, L, H, d, T, B, V, steps, warmup, sets, out=None):
    with tempfile.TemporaryDirectory() as tmp:
        recipe = os.path.join(tmp, "r.yaml")
        with open(recipe, "w") as f:
            f.write(f"""run: {{name: bench, device: cuda}}
model: {{vocab_size: {V}, seq_len: {T}, n_layer: {L}, n_head: {H}, d_model: {d}}}
data: {{train: {{format: synthetic, synthetic: {{kind: uniform}}}}, num_workers: 2}}
train: {{per_device_batch_size: {B}, max_steps: {warmup + steps}, log_every: {warmup}, max_grad_norm: 1.0}}
optim: {{lr: 1e-4, weight_decay: 0.1, betas: [0.9, 0.95], schedule: {{name: constant}}}}
precision: {{mode: bf16}}
metrics: {{progress: off}}
""")
        out = out or os.path.join(tmp, "out")
        args = [binary, "run", recipe, "--output-dir", out]
        for s in sets:
            args += ["--set", s]
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
        ms, lines = timed_ms(os.path.join(out, "metrics.jsonl"), warmup, steps)
        peak = lines[-1]["mem_peak_mb"]
        if "mfu" in lines[-1]:  # gputrain's own figure (metrics/flops.h), to check against this script's
            print(f"(gputrain's metrics.jsonl: mfu {100 * lines[-1]['mfu']:.1f}% over its last "
                  f"{steps} steps)", file=sys.stderr)
        return steps * B * T / (ms / 1000.0), ms / steps, peak


def try_bench_gputrain(side, *args, **kwargs):
    """bench_gputrain, or None when the run fails (its own message went to stderr), so the other
    sides are still measured."""
    try:
        return bench_gputrain(*args, **kwargs)
    except subprocess.CalledProcessError as e:
        print(f"{side}: the gputrain run failed (exit {e.returncode})", file=sys.stderr)
        return None


def main():
    ap = add_model_args(argparse.ArgumentParser(description=__doc__.splitlines()[0]),
                        vocab=50304, seq=1024, layers=12, heads=12, d=768)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--sides", default=",".join(SIDES),
                    help="gputrain+graphs: gputrain with kernels.cuda_graphs: true")
    ap.add_argument("--set", action="append", default=[], help="extra --set for the gputrain side")
    ap.add_argument("--profile", metavar="DIR", help="profile 3 steps of each side into DIR instead of timing")
    a = ap.parse_args()
    for side in a.sides.split(","):
        if side not in SIDES:
            ap.error(f"--sides: unknown side {side!r} (one of {', '.join(SIDES)})")
    if a.profile:
        os.makedirs(a.profile, exist_ok=True)
        # The graphed run too: its profiled steps are replays (captured at step 4, profiled from
        # warmup + 1), to show what is left between the device time and the step time.
        for side, extra in GPUTRAIN_SIDES.items():
            with tempfile.TemporaryDirectory() as tmp:
                sets = a.set + extra + [f"metrics.profile_at={a.warmup + 1}", "metrics.profile_steps=3"]
                if try_bench_gputrain(side, a.binary, a.layers, a.heads, a.d, a.seq, a.batch, a.vocab, 3, a.warmup,
                                      sets, out=os.path.join(tmp, "run")) is None:
                    continue
                with open(os.path.join(tmp, "run", "profile", "ops.md")) as f, \
                        open(os.path.join(a.profile, f"{side.replace('+', '-')}-ops.md"), "w") as g:
                    g.write(f.read())
        bench_pytorch(a.layers, a.heads, a.d, a.seq, a.batch, a.vocab, 3, a.warmup, False, a.profile)
        return 0
    L, H, d, T, B, V = a.layers, a.heads, a.d, a.seq, a.batch, a.vocab
    peak = peak_tflops()
    fpt = flops_per_token(L, d, T, V)
    print(provenance(a.binary))
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; {L} layers, d {d}, {H} heads, seq {T}, "
          f"vocab {V}; batch {B}; bf16 autocast, fused AdamW; {a.steps} steps after {a.warmup} warm-up; "
          f"{fpt / 1e6:.0f} MFLOP/token\n")
    print("| side | tokens/s | step ms | MFU | peak memory MiB |")
    print("|---|---:|---:|---:|---:|")
    for side in a.sides.split(","):
        if side in GPUTRAIN_SIDES:
            measured = try_bench_gputrain(side, a.binary, L, H, d, T, B, V, a.steps, a.warmup,
                                          a.set + GPUTRAIN_SIDES[side])
            if measured is None:
                print(f"| {side} | failed (see above) | | | |", flush=True)
                continue
            tps, ms, mem = measured
        else:
            tps, ms, mem = bench_pytorch(L, H, d, T, B, V, a.steps, a.warmup, PYTORCH_SIDES[side])
        mfu = f"{100 * tps * fpt / (peak * 1e12):.1f}%" if peak else "-"
        print(f"| {side} | {tps:,.0f} | {ms:.1f} | {mfu} | {mem:,.0f} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
