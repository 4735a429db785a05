#!/usr/bin/env python3
"""Peak memory of importing a sharded Hugging Face model through model.init_from: the weights are
read one shard at a time, so the import adds at most about one shard to what the model itself takes.

Saves a random LlamaForCausalLM (transformers, its real config class) of --layers blocks in bf16,
sharded at each of --shard-sizes, then runs gputrain for one step on each folder and on the same
model without init_from (random initialization), and reads the peak resident set of each process
(wait4's ru_maxrss). The run is LoRA (rank 1) under bf16-pure with a tiny batch, so that besides the
model the run keeps little: no optimizer state or gradients for the frozen weights. Prints a Markdown
table. Run: scripts/bench-hf-import.sh (builds first).
"""
import argparse
import json
import os
import tempfile

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from bench_args import peak_rss_mb, provenance

RECIPE = """model:
  seq_len: 32
  lora: {rank: 1}
data:
  train: {format: synthetic, synthetic: {vocab: 64}}
precision: {mode: bf16-pure}
train: {max_steps: 1, per_device_batch_size: 1, log_every: 1, eval_every: 0}
checkpoint: {every: 0}
metrics: {progress: off}
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--shard-sizes", nargs="+", default=["100MB", "400MB", "5GB"])
    a = ap.parse_args()
    print(provenance(a.binary))
    config = LlamaConfig(vocab_size=32000, hidden_size=1536, intermediate_size=4096, num_hidden_layers=a.layers,
                         num_attention_heads=12, num_key_value_heads=4, max_position_embeddings=2048)
    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        model = LlamaForCausalLM(config).to(torch.bfloat16)
        params = sum(p.numel() for p in model.parameters())
        folders = {}
        for size in a.shard_sizes:
            folder = os.path.join(tmp, f"llama-{size}")
            model.save_pretrained(folder, max_shard_size=size)
            shards = [f for f in os.listdir(folder) if f.endswith(".safetensors")]
            largest = max(os.path.getsize(os.path.join(folder, f)) for f in shards)
            folders[size] = (folder, len(shards), largest)
        del model
        recipe = os.path.join(tmp, "recipe.yaml")
        with open(recipe, "w") as f:
            f.write(RECIPE)
        run = [a.binary, "run", recipe, "--output-dir", os.path.join(tmp, "run"), "--overwrite"]
        first = next(iter(folders.values()))[0]
        # The same shapes without init_from: the model's own footprint (the recipe's keys from config.json).
        shapes = json.load(open(os.path.join(first, "config.json")))
        plain = run + ["--set", "model.arch=llama", "--set", f"model.vocab_size={shapes['vocab_size']}",
                       "--set", f"model.d_model={shapes['hidden_size']}", "--set",
                       f"model.n_layer={shapes['num_hidden_layers']}", "--set",
                       f"model.n_head={shapes['num_attention_heads']}", "--set",
                       f"model.n_kv_head={shapes['num_key_value_heads']}", "--set",
                       f"model.mlp_width={shapes['intermediate_size']}"]
        base = peak_rss_mb(plain)
        print(f"\nLlamaForCausalLM, {params / 1e6:.0f}M parameters, bf16 on disk "
              f"({params * 2 / 1e6:.0f} MB); gputrain holds it in bf16 (bf16-pure).\n")
        print("| weights | shards | largest shard | peak RSS | above random init |")
        print("|---|---:|---:|---:|---:|")
        print(f"| random initialization (no init_from) | - | - | {base:,.0f} MiB | - |")
        for size, (folder, n, largest) in folders.items():
            peak = peak_rss_mb(run + ["--set", f"model.init_from={folder}"])
            print(f"| init_from, max_shard_size {size} | {n} | {largest / 2**20:,.0f} MiB | {peak:,.0f} MiB | "
                  f"{peak - base:+,.0f} MiB |")


if __name__ == "__main__":
    main()
