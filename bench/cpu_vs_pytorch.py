#!/usr/bin/env python3
"""CPU training throughput: gputrain vs PyTorch eager and torch.compile, same torch install.

All train the same GPT (pre-LayerNorm, GELU(tanh), SDPA causal attention,
tied embeddings, GPT-2 init) with AdamW (PyTorch: fused=True; gputrain: ATen's
fused kernel), the same batch, sequence length and thread count, on uniform
random tokens, in fp32 and/or bf16 mixed precision (fp32 weights and optimizer,
the forward under CPU autocast to bf16: gputrain's precision.mode bf16). The
first `--warmup` steps (torch.compile's compilation among them) are excluded
from every rate. Prints a Markdown table. Run: scripts/bench.sh (uses the
setup's venv).
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from bench_args import provenance

SIZES = {
    # name: (n_layer, n_head, d_model, seq_len, batch, vocab), timed steps (about 10-60 s a side)
    "tiny (0.8M)": ((2, 4, 128, 64, 32, 512), 100),
    "small (7M)": ((4, 4, 256, 256, 8, 8192), 40),
    "gpt-mini (30M)": ((6, 6, 384, 256, 8, 50304), 15),
}


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.attn_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).view(B, T, 3, self.h, C // self.h).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + self.attn_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, H, d, T, V):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, d), nn.Embedding(T, d)
        self.h = nn.ModuleList(Block(d, H) for _ in range(L))
        self.ln_f = nn.LayerNorm(d)
        for n, p in self.named_parameters():
            if n.endswith("proj.weight"):
                nn.init.normal_(p, 0, 0.02 / math.sqrt(2 * L))
            elif p.dim() >= 2:
                nn.init.normal_(p, 0, 0.02)
            elif n.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1), device=idx.device))
        for b in self.h:
            x = b(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def bench_pytorch(L, H, d, T, B, V, steps, warmup, threads, precision, compiled):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = GPT(L, H, d, T, V)
    forward = torch.compile(model) if compiled else model
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and not n.startswith(("wte", "wpe"))]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and not n.startswith(("wte", "wpe")))]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), fused=True)
    start = None
    for step in range(warmup + steps):
        if step == warmup:
            start = time.perf_counter()
        tokens = torch.randint(0, V, (B, T + 1))
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = forward(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
    loss.item()
    return steps * B * T / (time.perf_counter() - start)


def timed_ms(metrics_path, warmup, steps):
    """Milliseconds the `steps` steps after `warmup` took, from a run's metrics.jsonl (step_ms per
    logged interval; the run logs every `warmup` steps); also the records."""
    lines = [json.loads(l) for l in open(metrics_path)]
    pairs = [(p, l) for p, l in zip(lines, lines[1:]) if l["step"] > warmup]
    n = sum(l["step"] - p["step"] for p, l in pairs)
    assert n == steps, (n, steps)
    return sum(l["step_ms"] * (l["step"] - p["step"]) for p, l in pairs), lines


def bench_gputrain(binary, L, H, d, T, B, V, steps, warmup, threads, precision):
    with tempfile.TemporaryDirectory() as tmp:
        recipe = os.path.join(tmp, "r.yaml")
        with open(recipe, "w") as f:
            f.write(f"""run: {{name: bench, threads: {threads}, device: cpu}}
model: {{vocab_size: {V}, seq_len: {T}, n_layer: {L}, n_head: {H}, d_model: {d}}}
data: {{train: {{format: synthetic, synthetic: {{kind: uniform}}}}, num_workers: 0}}
train: {{per_device_batch_size: {B}, max_steps: {warmup + steps}, log_every: {warmup}, max_grad_norm: 1.0}}
optim: {{lr: 1e-4, schedule: {{name: constant}}}}
precision: {{mode: {precision}}}
metrics: {{progress: off}}
""")
        out = os.path.join(tmp, "out")
        subprocess.run([binary, "run", recipe, "--output-dir", out], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        ms, _ = timed_ms(os.path.join(out, "metrics.jsonl"), warmup, steps)
        return steps * B * T / (ms / 1000.0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", default="build/gputrain")
    ap.add_argument("--steps", type=int, default=0, help="timed steps per run; 0 = the size's default")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--repeats", type=int, default=3, help="runs per side; the best is reported")
    ap.add_argument("--sizes", default=",".join(SIZES), help="comma-separated names from: " + ", ".join(SIZES))
    ap.add_argument("--precisions", default="fp32", help="comma-separated: fp32, bf16 (mixed: CPU autocast)")
    ap.add_argument("--compile", action="store_true", help="also time PyTorch under torch.compile (inductor)")
    args = ap.parse_args()

    print(provenance(args.binary))
    print(f"torch {torch.__version__}, {args.threads} threads, best of {args.repeats} runs a side, "
          f"timed after {args.warmup} warm-up steps\n")
    print("| model | layers x d_model | batch x seq | precision | PyTorch eager tok/s | "
          + ("torch.compile tok/s | " if args.compile else "") + "gputrain tok/s | gputrain / eager |"
          + (" gputrain / compile |" if args.compile else ""))
    print("|---|---|---|---|---:|" + ("---:|" if args.compile else "") + "---:|---:|" + ("---:|" if args.compile else ""))
    for name in args.sizes.split(","):
        (L, H, d, T, B, V), default_steps = SIZES[name]
        steps = args.steps or default_steps
        shape = (L, H, d, T, B, V, steps, args.warmup, args.threads)
        for precision in args.precisions.split(","):
            def best(f):
                return max(f() for _ in range(args.repeats))
            py = best(lambda: bench_pytorch(*shape, precision, False))
            co = best(lambda: bench_pytorch(*shape, precision, True)) if args.compile else None
            gt = best(lambda: bench_gputrain(args.binary, *shape, precision))
            row = f"| {name} | {L} x {d} | {B} x {T} | {precision} | {py:,.0f} | "
            row += f"{co:,.0f} | " if co else ""
            row += f"{gt:,.0f} | {gt / py:.2f} |"
            row += f" {gt / co:.2f} |" if co else ""
            print(row, flush=True)


if __name__ == "__main__":
    sys.exit(main())
