"""FP8 against bf16 for the matrix multiplies of a model's step, on one GPU (issue 59's groundwork).

For each GEMM of a GPT-2-shaped step (forward, and the backward's input and weight gradients), times
torch.matmul in bf16 and torch._scaled_mm in float8 (e4m3 inputs, per-tensor scales, bf16 output),
the latter alone, with its inputs cast by a scale known beforehand (delayed scaling: one pass over
each input), and with a current scale (amax, then the cast: eager ATen ops), and prints a table. CUDA events
after warm-up, median of --repeats. Needs an sm_89+ GPU (float8 tensor cores).

usage: fp8_matmul.py [--tokens 16384] [--d 768] [--vocab 50304] [--repeats 50]
"""
import argparse

import torch


def median_ms(fn, repeats):
    for _ in range(5):
        fn()
    times = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def quantize(x):
    scale = x.abs().amax().float().clamp(min=1e-12) / torch.finfo(torch.float8_e4m3fn).max
    return (x / scale).to(torch.float8_e4m3fn), scale


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", type=int, default=16384)
    p.add_argument("--d", type=int, default=768)
    p.add_argument("--vocab", type=int, default=50304)
    p.add_argument("--repeats", type=int, default=50)
    a = p.parse_args()
    n, d, v = a.tokens, a.d, a.vocab
    # (name, M, K, N): out[M, N] = x[M, K] @ w[K, N]; each layer's forward, input gradient, weight gradient.
    gemms = []
    for name, k, m in [("qkv", d, 3 * d), ("attn proj", d, d), ("mlp fc", d, 4 * d), ("mlp proj", 4 * d, d),
                       ("lm head", d, v)]:
        gemms += [(name + " fwd", n, k, m), (name + " dgrad", n, m, k), (name + " wgrad", k, n, m)]
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; tokens {n}, d {d}, vocab {v}; "
          f"median of {a.repeats}\n")
    print("| GEMM | M x K x N | bf16 ms | bf16 TFLOP/s | fp8 ms | fp8 TFLOP/s | fp8 + cast, delayed scale ms "
          "| fp8 + amax + cast ms | speed-up: delayed | current |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    total_bf16 = total_fp8d = total_fp8q = 0.0
    for name, m, k, nn in gemms:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(nn, k, device="cuda", dtype=torch.bfloat16)  # row-major [N, K]: w.t() is column-major
        bf16 = median_ms(lambda: torch.matmul(x, w.t()), a.repeats)
        xq, xs = quantize(x)
        wq, ws = quantize(w)
        fp8 = median_ms(lambda: torch._scaled_mm(xq, wq.t(), scale_a=xs, scale_b=ws, out_dtype=torch.bfloat16),
                        a.repeats)

        def quantized():
            q1, s1 = quantize(x)
            q2, s2 = quantize(w)
            return torch._scaled_mm(q1, q2.t(), scale_a=s1, scale_b=s2, out_dtype=torch.bfloat16)

        fp8q = median_ms(quantized, a.repeats)
        inv_x, inv_w = 1 / xs, 1 / ws

        def delayed():  # the scales are last step's: one scaling cast per input
            q1 = (x * inv_x).to(torch.float8_e4m3fn)
            q2 = (w * inv_w).to(torch.float8_e4m3fn)
            return torch._scaled_mm(q1, q2.t(), scale_a=xs, scale_b=ws, out_dtype=torch.bfloat16)

        fp8d = median_ms(delayed, a.repeats)
        ref = torch.matmul(x.float(), w.float().t())
        err = ((quantized().float() - ref).norm() / ref.norm()).item()
        assert err < 0.1, f"{name}: fp8 relative error {err}"
        flops = 2 * m * k * nn
        total_bf16 += bf16
        total_fp8d += fp8d
        total_fp8q += fp8q
        print(f"| {name} | {m} x {k} x {nn} | {bf16:.3f} | {flops / bf16 / 1e9:.0f} | {fp8:.3f} | "
              f"{flops / fp8 / 1e9:.0f} | {fp8d:.3f} | {fp8q:.3f} | {bf16 / fp8d:.2f}x | {bf16 / fp8q:.2f}x |")
    print(f"\nsummed: bf16 {total_bf16:.2f} ms, fp8 with delayed scales {total_fp8d:.2f} ms "
          f"({total_bf16 / total_fp8d:.2f}x), with current scales {total_fp8q:.2f} ms ({total_bf16 / total_fp8q:.2f}x)")


if __name__ == "__main__":
    main()
