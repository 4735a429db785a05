#!/usr/bin/env python3
"""QLoRA on the CPU: the 4-bit base's bytes per parameter measured from outside, and the step time
against bf16 LoRA on the same model.

Memory: a Llama-3-shaped model (d 1536, SwiGLU 4096, 12 heads, 4 key/value heads) is saved by
transformers in bf16 at two depths, and gputrain fine-tunes each through model.init_from for one
step (LoRA rank 1, bf16-pure, a tiny batch), with and without model.quantize.base: nf4. The peak
resident set (wait4's ru_maxrss) of the deeper run less the shallower one's, over the block weights
the extra layers hold, is what each base parameter costs: the fixed costs (the process, the
embeddings, the head) cancel.

Speed: the same shapes at d 1024, LoRA rank 16 on every block Linear, bf16 autocast, seq 256; the
median step time of --steps steps (summary.json) with the base in fp32 and in NF4.
Prints Markdown tables. Run: python3 bench/qlora.py --binary build/gputrain
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from transformers import LlamaConfig

from bench_args import peak_rss_mb, provenance
from hf_import_memory import RECIPE as MEMORY_RECIPE  # the same one-step LoRA rank-1 run, bf16-pure

SAVE = """import json, sys, torch
from transformers import LlamaConfig, LlamaForCausalLM
torch.manual_seed(0)
LlamaForCausalLM(LlamaConfig(**json.loads(sys.argv[1]))).to(torch.bfloat16).save_pretrained(sys.argv[2],
                                                                                           max_shard_size="200MB")
"""

SPEED_RECIPE = """model: {arch: llama, vocab_size: 8192, seq_len: 256, n_layer: 4, n_head: 8, n_kv_head: 4,
        d_model: 1024, mlp_width: 2816, lora: {rank: 16, targets: [qkv, proj, mlp_up, mlp_down]}}
data:
  train: {format: synthetic, synthetic: {vocab: 64}}
precision: {mode: bf16}
train: {max_steps: STEPS, per_device_batch_size: 4, log_every: 1, eval_every: 0}
checkpoint: {every: 0}
metrics: {progress: off}
"""


def block_params(config, layers):
    d, f, kv = config.hidden_size, config.intermediate_size, config.num_key_value_heads
    per_layer = 2 * d * d + 2 * d * (kv * d // config.num_attention_heads) + 3 * d * f
    return per_layer * layers


def memory_table(binary, tmp, depths):
    rows = []
    folders = {}
    for layers in depths:
        config = dict(vocab_size=32000, hidden_size=1536, intermediate_size=4096, num_hidden_layers=layers,
                      num_attention_heads=12, num_key_value_heads=4, max_position_embeddings=2048)
        folder = os.path.join(tmp, f"llama-{layers}")
        # Saved by a child: a child forked from a parent holding the model starts with its pages counted.
        subprocess.run([sys.executable, "-c", SAVE, json.dumps(config), folder], check=True, capture_output=True)
        folders[layers] = (folder, LlamaConfig(**config))
    recipe = os.path.join(tmp, "memory.yaml")
    with open(recipe, "w") as f:
        f.write(MEMORY_RECIPE)
    peaks = {}
    cases = [(q, c) for c in ("true", "false") for q in ("none", "nf4")]
    for quant, cache in cases:
        for layers, (folder, _) in folders.items():
            peaks[(quant, cache, layers)] = peak_rss_mb(
                [binary, "run", recipe, "--output-dir", os.path.join(tmp, "run"), "--overwrite", "--set",
                 f"model.init_from={folder}", "--set", f"model.quantize.base={quant}", "--set",
                 f"run.cpu_malloc_cache={cache}"])
    lo, hi = depths
    extra = block_params(folders[hi][1], hi - lo)
    for quant, cache in cases:
        a, b = peaks[(quant, cache, lo)], peaks[(quant, cache, hi)]
        rows.append(f"| {quant} | {cache} | {a:.0f} | {b:.0f} | {(b - a) * 1024 * 1024 / extra:.3f} |")
    return (f"Llama-3-shaped, d 1536, {lo} and {hi} blocks ({extra / 1e6:.0f}M block weights between them), "
            "read from a bf16 folder, bf16-pure; bytes per base parameter = peak difference / those weights\n\n"
            f"| model.quantize.base | run.cpu_malloc_cache | peak MiB, {lo} blocks | peak MiB, {hi} blocks | "
            "bytes per base parameter |\n|---|---|---:|---:|---:|\n" + "\n".join(rows))


def speed_table(binary, tmp, steps, repeats):
    recipe = os.path.join(tmp, "speed.yaml")
    with open(recipe, "w") as f:
        f.write(SPEED_RECIPE.replace("STEPS", str(steps)))
    times = {}
    for _ in range(repeats):  # interleaved, so that the machine's noise falls on both alike
        for quant in ("none", "nf4"):
            out = os.path.join(tmp, f"speed-{quant}")
            peak_rss_mb([binary, "run", recipe, "--output-dir", out, "--overwrite", "--set",
                         f"model.quantize.base={quant}"])
            lines = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
            step_s = [l["step_ms"] / 1000 for l in lines[1:] if "step_ms" in l]  # the first warms up
            times.setdefault(quant, []).append(statistics.median(step_s))
    plain, quant = statistics.median(times["none"]), statistics.median(times["nf4"])
    return ("Llama-shaped d 1024, 4 blocks, LoRA rank 16 on every block Linear, bf16 autocast, batch 4 x 256; "
            f"median step time of {steps} steps, median of {repeats} runs\n\n"
            "| base | step time s | against fp32 base |\n|---|---:|---:|\n"
            f"| fp32 (bf16 LoRA) | {plain:.3f} | 1.00x |\n| nf4 (QLoRA) | {quant:.3f} | {quant / plain:.2f}x |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="build/gputrain")
    ap.add_argument("--depths", type=int, nargs=2, default=[4, 12])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    print(provenance(a.binary))
    with tempfile.TemporaryDirectory() as tmp:
        print("\n" + memory_table(a.binary, tmp, a.depths) + "\n")
        print(speed_table(a.binary, tmp, a.steps, a.repeats))


if __name__ == "__main__":
    main()
