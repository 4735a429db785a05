#!/usr/bin/env python3
"""QLoRA against bf16 LoRA on the chat sample: the same short fine-tune, the base in NF4 (double
quantization) or kept in fp32, the products in bf16 either way; their eval loss over the held-out
conversations, every window (`gputrain eval`).

The recipes are configs/chat-lora.yaml's chain, as its header runs it: configs/llama-shakespeare.yaml
trains the base (its --base-steps), export writes it as a Hugging Face folder, data prepare turns
configs/data/chat-sample.jsonl into token shards (bytes tokenizer, a tenth held out), and each
fine-tune runs configs/chat-lora.yaml with precision.mode bf16, with and without model.quantize.base nf4.
Prints a Markdown table. Run: python3 bench/qlora_chat.py --binary build/gputrain
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from bench_args import provenance

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def gputrain(binary, *args):
    subprocess.run([binary, *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="build/gputrain", help="the gputrain executable")
    ap.add_argument("--base-steps", type=int, default=600, help="steps of configs/llama-shakespeare.yaml")
    ap.add_argument("--steps", type=int, default=300, help="steps of each fine-tune (configs/chat-lora.yaml)")
    a = ap.parse_args()
    binary = os.path.abspath(a.binary)
    with tempfile.TemporaryDirectory() as tmp:
        base, hf, data = (os.path.join(tmp, x) for x in ("base", "hf", "chat"))
        gputrain(binary, "run", os.path.join(ROOT, "configs/llama-shakespeare.yaml"), "--output-dir", base,
                 "--set", f"train.max_steps={a.base_steps}", "--set", "checkpoint.every=0")
        gputrain(binary, "export", base, "--format", "hf", "--out", hf)
        gputrain(binary, "data", "prepare", os.path.join(ROOT, "configs/data/chat-sample.jsonl"), "-o", data,
                 "--format", "chat", "--tokenizer", "bytes", "--val-fraction", "0.1")
        rows = []
        for name, extra in (("bf16 LoRA (fp32 base, bf16 products)", []),
                            ("QLoRA (NF4 base, double quantization, bf16 products)", ["model.quantize.base=nf4"])):
            out = os.path.join(tmp, "nf4" if extra else "lora")
            sets = [f"model.init_from={hf}", f"data.train.path={data}/train_*.bin",
                    f"data.eval.path={data}/val_*.bin", "precision.mode=bf16", f"train.max_steps={a.steps}",
                    f"checkpoint.every={a.steps}"] + extra  # one checkpoint, at the end: what eval reads
            args = ["run", os.path.join(ROOT, "configs/chat-lora.yaml"), "--output-dir", out]
            for s in sets:
                args += ["--set", s]
            gputrain(binary, *args)
            evals = []
            for precision in ("fp32", "bf16"):
                result = os.path.join(tmp, f"eval-{precision}.json")
                gputrain(binary, "eval", out, "--data", f"{data}/val_*.bin", "--device", "cpu", "--precision",
                         precision, "--out", result)
                with open(result) as f:
                    evals.append(json.load(f)["loss"])
            with open(os.path.join(out, "summary.json")) as f:
                summary = json.load(f)
            rows.append((name, summary["final_loss"], evals[0], evals[1], summary["wall_s"]))
    print(provenance(binary))
    print(f"base: configs/llama-shakespeare.yaml, {a.base_steps} steps; fine-tunes: configs/chat-lora.yaml, "
          f"{a.steps} steps, precision.mode bf16\n")
    print("| fine-tune | final train loss | eval loss (fp32 eval) | eval loss (bf16 eval) | wall s |")
    print("|---|---:|---:|---:|---:|")
    for name, final, e32, e16, wall in rows:
        print(f"| {name} | {final:.4f} | {e32:.4f} | {e16:.4f} | {wall:.0f} |")
    gap = rows[1][2] - rows[0][2]
    print(f"\nQLoRA - bf16 LoRA, eval loss (fp32 eval): {gap:+.4f} ({100 * gap / rows[0][2]:+.2f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
