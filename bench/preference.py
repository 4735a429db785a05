#!/usr/bin/env python3
"""Preference alignment on the CPU (docs/preference.md): does DPO learn a preference the base does not
have, on pairs it never saw; and what the reference model costs in memory.

Convergence: a synthetic task, "Is N even?" answered " yes" or " no", the right answer chosen. Train
and held-out pairs use disjoint numbers, so a held-out pair is only right by the rule (the last
digit), not by memory. The base is a random GPT (GPT-2's tokenizer, ../shared/data/gpt2), which has
no preference: its held-out accuracy (share of pairs whose chosen answer it finds likelier; `gputrain
eval` of SimPO's rewards, which need no reference) is about 0.5. DPO then trains on the train pairs,
and `gputrain eval` reports its reward accuracy on the held-out pairs (the policy's log-ratio to the
reference larger for the chosen answer).

Memory: the peak resident set (wait4's ru_maxrss, from outside) of a short LoRA run of a larger GPT
with SimPO (no reference), DPO with the adapters-off reference (reference: auto), and DPO with a frozen
copy (reference: model); and each rank's of a 2-rank full fine-tune, SimPO against DPO's frozen copy
under ZeRO-2 (whole on each rank) and ZeRO-3 (its rows spread as the policy's).

Speed: pairs per second with each prompt computed once (data.*.shared_prompt, one row a pair)
against twice (TRL's two rows), for prompts 4x as long as each completion; each mode's seq_len the
longest row it needs; alternating pairs of runs (--speed-repeats), the median speed-up.

Packing: pairs per second padded against packed (data.train.pack_pairs), in both layouts, for
prompts of varied length.

Prints Markdown tables. Run: python3 bench/preference.py --binary build/gputrain
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile

from bench_args import peak_rss_mb, provenance

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPT2 = os.path.join(os.path.dirname(ROOT), "shared", "data", "gpt2")


def gputrain(binary, *args):
    r = subprocess.run([binary, *args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"gputrain {' '.join(args)} failed:\n{r.stdout}\n{r.stderr}")
    return r.stdout


def write_pairs(path, numbers):
    with open(path, "w") as f:
        for n in numbers:
            right, wrong = (" yes", " no") if n % 2 == 0 else (" no", " yes")
            f.write(json.dumps({"prompt": f"Is {n} even? Answer:", "chosen": right, "rejected": wrong}) + "\n")


def prepare(binary, pairs, out):
    gputrain(binary, "data", "prepare", pairs, "--format", "preference", "--tokenizer", "gpt2", "--vocab",
             os.path.join(GPT2, "encoder.json"), "--merges", os.path.join(GPT2, "vocab.bpe"), "-o", out,
             "--val-fraction", "0")
    return os.path.join(out, "train_pairs.bin")


def recipe(tmp, objective, d, layers, train, held_out, model_extra=""):
    path = os.path.join(tmp, f"{objective}_{d}.yaml")
    with open(path, "w") as f:
        f.write(f"""model: {{arch: gpt, vocab_size: 50304, seq_len: 16, n_layer: {layers}, n_head: 4, d_model: {d}{model_extra}}}
data:
  train: {{format: preference, path: {train}}}
  eval: {{format: preference, path: {held_out}}}
train: {{objective: {objective}, per_device_batch_size: 16, log_every: 25, eval_steps: 4}}
optim: {{lr: 1.0e-3, weight_decay: 0.0, schedule: {{warmup_steps: 10}}}}
run: {{threads: 2, seed: 1}}
metrics: {{progress: off}}
""")
    return path


def held_out_eval(binary, run, held_out):
    return json.loads(gputrain(binary, "eval", run, "--data", held_out, "--batch-size", "50"))


def convergence(binary, tmp, steps):
    numbers = list(range(10, 100000))
    random.Random(0).shuffle(numbers)
    write_pairs(os.path.join(tmp, "train.jsonl"), numbers[:4000])
    write_pairs(os.path.join(tmp, "held_out.jsonl"), numbers[4000:4400])
    train = prepare(binary, os.path.join(tmp, "train.jsonl"), os.path.join(tmp, "train"))
    held_out = prepare(binary, os.path.join(tmp, "held_out.jsonl"), os.path.join(tmp, "held_out"))
    # The base's own preference: SimPO's rewards (beta x mean log-probability) after a step of lr ~0.
    base = os.path.join(tmp, "base")
    gputrain(binary, "run", recipe(tmp, "simpo", 64, 2, train, held_out), "--output-dir", base, "--set",
             "train.max_steps=1", "--set", "optim.lr=1e-12", "--set", "optim.schedule.warmup_steps=0", "--set",
             "checkpoint.every=1")
    before = held_out_eval(binary, base, held_out)
    dpo = os.path.join(tmp, "dpo")
    gputrain(binary, "run", recipe(tmp, "dpo", 64, 2, train, held_out), "--output-dir", dpo, "--set",
             f"train.max_steps={steps}", "--set", f"checkpoint.every={steps}", "--set", f"train.eval_every={steps // 4}")
    after = held_out_eval(binary, dpo, held_out)
    curve = [json.loads(l) for l in open(os.path.join(dpo, "metrics.jsonl"))]
    print(f"\n**DPO learns a preference the base lacks** (`bench/preference.py`; {provenance(binary)}): GPT d 64, "
          f"2 layers, GPT-2 tokenizer; 4000 train pairs, 400 held-out pairs of other numbers; 16 pairs a step, "
          f"AdamW 1e-3, beta 0.1\n")
    print("| model | held-out pairs | reward accuracy | reward margin | eval loss |")
    print("|---|---:|---:|---:|---:|")
    print(f"| the base (its own preference: SimPO's rewards) | {before['pairs']} | {before['rewards/accuracies']:.3f} "
          f"| {before['rewards/margins']:.4f} | - |")
    for line in curve:
        if "eval_rewards/accuracies" in line:
            print(f"| DPO, step {line['step']} (train.eval_every, {line['step'] * 16} pairs seen) | 64 | "
                  f"{line['eval_rewards/accuracies']:.3f} | {line['eval_rewards/margins']:.4f} | {line['eval_loss']:.4f} |")
    print(f"| DPO, step {steps}, every held-out pair (`gputrain eval`) | {after['pairs']} | "
          f"{after['rewards/accuracies']:.3f} | {after['rewards/margins']:.4f} | {after['loss']:.4f} |")
    return train, held_out


def memory_data(binary, tmp):
    write_pairs(os.path.join(tmp, "pairs.jsonl"), range(10, 400))
    pairs = prepare(binary, os.path.join(tmp, "pairs.jsonl"), os.path.join(tmp, "pairs"))
    return pairs, pairs


def reference_memory(binary, tmp, train, held_out, d, layers, steps):
    lora = ", lora: {rank: 8, alpha: 16, targets: [qkv, proj, mlp_up, mlp_down]}"
    rows = []
    for name, objective, sets in (("SimPO (no reference)", "simpo", []),
                                  ("DPO, reference: auto (the adapters off)", "dpo", []),
                                  ("DPO, reference: model (a frozen copy)", "dpo", ["train.preference.reference=model"])):
        path = recipe(tmp, objective, d, layers, train, held_out, lora)
        args = [binary, "run", path, "--output-dir", os.path.join(tmp, f"mem_{len(rows)}"), "--set",
                f"train.max_steps={steps}", "--set", "checkpoint.every=0", "--set", "optim.schedule.warmup_steps=0"]
        for s in sets:
            args += ["--set", s]
        rows.append((name, peak_rss_mb(args)))
    weights_mb = json.loads(open(os.path.join(tmp, "mem_0", "summary.json")).read())["parameters"] * 4 / 2**20
    print(f"\n**The reference model's memory** (`bench/preference.py`; {provenance(binary)}): GPT d {d}, {layers} "
          f"layers, LoRA rank 8 on every block Linear, {steps} steps of 16 pairs; peak resident set from outside "
          f"(wait4); the model's weights: {weights_mb:.1f} MiB\n")
    print("| run | peak RSS (MiB) | over SimPO (MiB) |")
    print("|---|---:|---:|")
    for name, mb in rows:
        print(f"| {name} | {mb:.1f} | {mb - rows[0][1]:+.1f} |")


def zero3_reference_memory(binary, tmp, train, held_out, d, layers):
    """Each rank's peak resident set (VmHWM read from /proc at the failpoint train.done, bench/rank_memory.py)
    of a 2-rank full fine-tune: SimPO (no reference) against DPO's frozen copy, under ZeRO-2 (the copy
    whole on each rank) and ZeRO-3 (the copy's rows spread as the policy's)."""
    from rank_memory import measure
    rows = []
    for zero in (2, 3):
        for name, objective in (("SimPO (no reference)", "simpo"), ("DPO, a frozen copy (reference: auto)", "dpo")):
            out = os.path.join(tmp, f"zero{zero}_{objective}")
            sets = [f"parallel.zero={zero}", "train.max_steps=3", "checkpoint.every=0", "checkpoint.at_end=false",
                    "optim.schedule.warmup_steps=0", "data.eval.format=none", "train.per_device_batch_size=8"]
            peak = measure(binary, recipe(tmp, objective, d, layers, train, held_out), 2, out, sets)[1]
            rows.append((zero, name, peak))
    weights_mb = json.load(open(os.path.join(tmp, "zero3_dpo", "summary.json")))["parameters"] * 4 / 2**20
    print(f"\n**The frozen copy under ZeRO-3** (`bench/preference.py`; {provenance(binary)}): GPT d {d}, {layers} "
          f"layers, full fine-tune on 2 ranks, 3 steps of 8 pairs per rank; each rank's peak resident set from "
          f"/proc (VmHWM, the larger rank); the model's weights: {weights_mb:.1f} MiB, half of them {weights_mb / 2:.1f}\n")
    print("| parallel.zero | run | peak RSS per rank (MiB) | over SimPO (MiB) |")
    print("|---:|---|---:|---:|")
    for zero, name, mb in rows:
        base = next(m for z, n, m in rows if z == zero)
        print(f"| {zero} | {name} | {mb:.1f} | {mb - base:+.1f} |")


def longest_rows(pairs_bin):
    """The longest row of each layout: prompt + chosen + rejected, and prompt + the longer completion."""
    import struct
    raw = open(pairs_bin[:-4] + ".idx", "rb").read()
    lengths = struct.unpack(f"<{len(raw) // 8}q", raw)
    triples = [lengths[i:i + 3] for i in range(0, len(lengths), 3)]
    return max(sum(t) for t in triples), max(t[0] + max(t[1], t[2]) for t in triples)


WORDS = ("the of and to in is was for on that with as by at from his her their which would "
         "about river mountain city winter garden letter morning station window music").split()
STEP_PAIRS = 32  # 8 a micro-batch, 4 accumulated


def write_long_pairs(path, seed, prompt_words):
    """512 "Is N even?" pairs after a prompt of prompt_words(rng) random words; completions of 14 words."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for n in range(512):
            prompt = " ".join(rng.choice(WORDS) for _ in range(prompt_words(rng))) + f" Is {n} even? Answer:"
            answer = " ".join(rng.choice(WORDS) for _ in range(14))
            right, wrong = (" yes, " + answer, " no, " + answer) if n % 2 == 0 else (" no, " + answer, " yes, " + answer)
            f.write(json.dumps({"prompt": prompt, "chosen": right, "rejected": wrong}) + "\n")


def pairs_per_second(binary, tmp, d, layers, pairs, steps, out, sets):
    """A DPO run of `steps` steps of STEP_PAIRS pairs with `sets` ({key: value}): its pairs per second."""
    args = [binary, "run", recipe(tmp, "dpo", d, layers, pairs, pairs), "--output-dir", out]
    for key, value in {"train.max_steps": steps, "checkpoint.every": 0, "optim.schedule.warmup_steps": 0,
                       "data.eval.format": "none", "train.per_device_batch_size": 8, "train.grad_accum_steps": 4,
                       **sets}.items():
        args += ["--set", f"{key}={value}"]
    gputrain(*args)
    return steps * STEP_PAIRS / json.load(open(os.path.join(out, "summary.json")))["train_s"]


def shared_prompt_speed(binary, tmp, d, layers, steps, repeats):
    """Pairs per second, two rows a pair against one, in `repeats` alternating pairs of runs (the VM's
    drift then falls on both of a pair); each pair's speed-up and their median."""
    path = os.path.join(tmp, f"long_{layers}.jsonl")
    write_long_pairs(path, 0, lambda rng: 60)
    pairs = prepare(binary, path, os.path.join(tmp, f"long_{layers}"))
    one_row, two_rows = longest_rows(pairs)
    runs = []
    for i in range(repeats):
        rates = [pairs_per_second(binary, tmp, d, layers, pairs, steps, os.path.join(tmp, f"speed_{shared}_{layers}_{i}"),
                                  {"data.train.shared_prompt": shared, "model.seq_len": seq})
                 for shared, seq in (("false", two_rows - 1), ("true", one_row - 1))]
        runs.append(rates)
    print(f"\n**The prompt computed once** (`bench/preference.py`; {provenance(binary)}): DPO, GPT d {d}, {layers} "
          f"layers, GPT-2 tokenizer; prompts of about 70 tokens, completions of about 17 (prompt 4x a completion); "
          f"steps of 32 pairs (8 a micro-batch, 4 accumulated), {steps} steps; seq_len {two_rows - 1} (two rows a "
          f"pair, as TRL) and {one_row - 1} (one row a pair, data.train.shared_prompt); {repeats} alternating pairs "
          f"of runs\n")
    print("| pair of runs | twice (two rows) pairs/s | once (one row) pairs/s | speed-up |")
    print("|---:|---:|---:|---:|")
    for i, (twice, once) in enumerate(runs):
        print(f"| {i + 1} | {twice:.2f} | {once:.2f} | {once / twice:.3f}x |")
    print(f"\nmedian speed-up: {statistics.median(once / twice for twice, once in runs):.2f}x")


def packing_speed(binary, tmp, d, layers, steps):
    """Pairs per second with pairs padded to model.seq_len against packed (data.train.pack_pairs), in
    both layouts, for prompts of varied length (10 to 110 words, as real preference sets vary)."""
    path = os.path.join(tmp, f"varied_{layers}.jsonl")
    write_long_pairs(path, 1, lambda rng: rng.randint(10, 110))
    pairs = prepare(binary, path, os.path.join(tmp, f"varied_{layers}"))
    one_row, two_rows = longest_rows(pairs)
    rows = []
    for layout, shared, longest in (("two rows a pair", "false", two_rows - 1), ("the prompt once", "true", one_row - 1)):
        # Packed rows twice the longest: room for two or three pairs where padding took it.
        for pack, seq in (("false", longest), ("true", longest), ("true", 2 * longest)):
            rate = pairs_per_second(binary, tmp, d, layers, pairs, steps,
                                    os.path.join(tmp, f"pack_{shared}_{pack}_{seq}_{layers}"),
                                    {"data.train.shared_prompt": shared, "data.train.pack_pairs": pack,
                                     "model.seq_len": seq})
            rows.append((layout, pack == "true", seq, rate))
    print(f"\n**Packed pairs** (`bench/preference.py`; {provenance(binary)}): DPO, GPT d {d}, {layers} layers, GPT-2's "
          f"tokenizer; prompts of 10 to 110 words (varied), completions of about 17 tokens; steps of 32 pairs (8 a "
          f"micro-batch, 4 accumulated), {steps} steps; model.seq_len the longest row of the layout, or twice it\n")
    print("| layout | data.train.pack_pairs | seq_len | pairs/s | speed-up |")
    print("|---|---|---:|---:|---:|")
    for layout, packed, seq, rate in rows:
        padded = next(r for l, p, _, r in rows if l == layout and not p)
        print(f"| {layout} | {str(packed).lower()} | {seq} | {rate:.1f} | {rate / padded:.2f}x |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="build/gputrain", help="the gputrain executable")
    ap.add_argument("--steps", type=int, default=400, help="DPO steps of the convergence run (0: the memory runs only)")
    ap.add_argument("--memory-d", type=int, default=768, help="d_model of the memory runs' GPT")
    ap.add_argument("--memory-layers", type=int, default=8)
    ap.add_argument("--speed-steps", type=int, default=8, help="steps of each speed run, 32 pairs each (0: none)")
    ap.add_argument("--speed-repeats", type=int, default=3,
                    help="alternating pairs of shared-prompt runs (two rows, one row), their median speed-up")
    ap.add_argument("--speed-only", action="store_true", help="only the speed runs (shared prompt, packing)")
    ap.add_argument("--speed-layers", type=int, nargs="+", default=[4, 16],
                    help="layers of the speed runs' GPT (d 512): few make the 50k-word head most of the work")
    a = ap.parse_args()
    binary = os.path.abspath(a.binary)
    with tempfile.TemporaryDirectory() as tmp:
        if not a.speed_only:
            train, held_out = convergence(binary, tmp, a.steps) if a.steps > 0 else memory_data(binary, tmp)
            reference_memory(binary, tmp, train, held_out, a.memory_d, a.memory_layers, 5)
            zero3_reference_memory(binary, tmp, train, held_out, a.memory_d, a.memory_layers)
        for layers in (a.speed_layers if a.speed_steps > 0 else []):
            shared_prompt_speed(binary, tmp, 512, layers, a.speed_steps, a.speed_repeats)
            packing_speed(binary, tmp, 512, layers, a.speed_steps)


if __name__ == "__main__":
    main()
