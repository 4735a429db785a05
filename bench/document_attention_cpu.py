"""Packed documents' attention on the CPU (docs/benchmarks.md, "Packed documents"): one document at a
time (what gputrain runs: the batch's tokens split by document, each document's causal
scaled_dot_product_attention) against one attention over the window with a [B, 1, T, T] block mask,
and plain causal attention over the window (which lets documents read each other), forward and
backward, through the same ATen kernels gputrain calls (torch's own build).
Usage: document_attention_cpu.py [--threads 2] [--repeats 3]
"""
import argparse
import time

import torch


def document_lengths(B, T, mean, gen):
    """Per row, lengths drawn uniformly in [mean/2, 3 mean/2] until the row is full."""
    rows = []
    for _ in range(B):
        lengths, t = [], 0
        while t < T:
            n = min(T - t, int(torch.randint(max(1, mean // 2), mean * 3 // 2 + 1, (1,), generator=gen)))
            lengths.append(n)
            t += n
        rows.append(lengths)
    return rows


def per_document(q, k, v, rows):
    B, H, T, D = q.shape
    flat = lambda x: x.transpose(1, 2).reshape(B * T, x.shape[1], D)
    lengths = [n for row in rows for n in row]
    out = []
    for qi, ki, vi in zip(flat(q).split(lengths), flat(k).split(lengths), flat(v).split(lengths)):
        heads = lambda x: x.transpose(0, 1).unsqueeze(0)
        out.append(torch.nn.functional.scaled_dot_product_attention(heads(qi), heads(ki), heads(vi), is_causal=True)
                   .squeeze(0).transpose(0, 1))
    return torch.cat(out).view(B, T, H, D).transpose(1, 2)


def block_mask(q, k, v, rows):
    B, H, T, D = q.shape
    document = torch.zeros(B, T, dtype=torch.long)
    for b, row in enumerate(rows):
        t = 0
        for i, n in enumerate(row):
            document[b, t:t + n] = i
            t += n
    allowed = (document[:, :, None] == document[:, None, :]) & torch.ones(T, T, dtype=torch.bool).tril()
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed.unsqueeze(1))


def causal(q, k, v, rows):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    gen = torch.Generator().manual_seed(0)
    print(f"torch {torch.__version__}, {a.threads} threads; B 4, 8 heads of 64; ms per forward + backward (best of {a.repeats})")
    print()
    print("| dtype | T | mean document | per document | block mask | causal (leaks) |")
    print("|---|---|---|---|---|---|")
    for dtype in (torch.float32, torch.bfloat16):
        for T, mean in ((512, 32), (512, 128), (2048, 128), (2048, 512)):
            rows = document_lengths(4, T, mean, gen)
            q, k, v = [torch.randn(4, 8, T, 64, dtype=dtype, requires_grad=True) for _ in range(3)]
            cells = []
            for f in (per_document, block_mask, causal):
                best = float("inf")
                for _ in range(a.repeats):
                    start = time.perf_counter()
                    f(q, k, v, rows).sum().backward()
                    best = min(best, time.perf_counter() - start)
                cells.append(f"{best * 1000:.0f}")
            print(f"| {str(dtype).split('.')[-1]} | {T} | {mean} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
