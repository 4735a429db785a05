#!/usr/bin/env python3
"""Muon against AdamW, honestly (docs/benchmarks.md, "Muon"): a GPT-2-shaped model trained with each on
the same token budget, each at its best lr of a small grid, on tinyshakespeare (bytes) and on the
known-entropy synthetic language; the eval loss every --eval-every steps, and how many steps Muon needs
to reach AdamW's final eval loss (the issue's target: at most 0.8x).

And the mixture-of-experts balancing: the busiest expert's load over the mean (moe_load_max_mean,
averaged over the run's steps and over its last quarter) with model.moe.balance: bias against the
balancing loss (aux_loss) and against none, with each one's eval loss.

Prints Markdown tables. Run: python3 bench/muon.py --binary build/gputrain
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from bench_args import provenance

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXT = os.path.join(os.path.dirname(ROOT), "shared", "data", "tinyshakespeare.txt")

DATA = {
    "tinyshakespeare": (
        f"data:\n  train: {{format: text, path: {TEXT}, span: [0.0, 0.9]}}\n"
        f"  eval: {{format: text, path: {TEXT}, span: [0.9, 1.0]}}\n"),
    "synthetic": ("data:\n  train: {format: synthetic, synthetic: {vocab: 64, order: 2, branching: 4}}\n"
                  "  eval: {format: synthetic, synthetic: {vocab: 64, order: 2, branching: 4}}\n"),
}


def run(binary, recipe, sets, workdir, name):
    path = os.path.join(workdir, name + ".yaml")
    with open(path, "w") as f:
        f.write(recipe)
    out = os.path.join(workdir, name)
    args = [binary, "run", path, "--output-dir", out, "--overwrite"]
    for s in sets:
        args += ["--set", s]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{name} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    lines = [json.loads(x) for x in open(os.path.join(out, "metrics.jsonl"))]
    evals = [(x["step"], x["eval_loss"]) for x in lines if x.get("eval_loss") is not None]
    return evals, lines, json.load(open(os.path.join(out, "summary.json")))


def gpt_recipe(args, data):
    return (f"run: {{name: muon-bench, threads: 2, seed: 0}}\n"
            f"model: {{arch: gpt, vocab_size: 256, seq_len: {args.seq}, n_layer: {args.layers}, n_head: {args.heads}, "
            f"d_model: {args.d}}}\n" + DATA[data] +
            f"train: {{per_device_batch_size: {args.batch}, max_steps: {args.steps}, log_every: {args.eval_every}, "
            f"eval_every: {args.eval_every}, eval_steps: 16}}\n"
            f"optim: {{schedule: {{name: cosine, warmup_steps: {args.steps // 20}, min_lr_ratio: 0.1}}}}\n"
            "metrics: {progress: off}\n")


def steps_to_reach(evals, target):
    for step, loss in evals:
        if loss <= target:
            return step
    return None


def convergence(args, workdir):
    print("\n| data | optimizer | lr (best of the grid) | final eval loss | steps to AdamW's final | of AdamW's steps |")
    print("|---|---|---|---:|---:|---:|")
    curves = {}
    for data in args.data.split(","):
        recipe = gpt_recipe(args, data)
        best = {}
        for lr in args.adamw_lrs.split(","):
            evals, _, s = run(args.binary, recipe, ["optim.name=adamw", f"optim.lr={lr}"], workdir, f"{data}-adamw-{lr}")
            if "adamw" not in best or evals[-1][1] < best["adamw"][1][-1][1]:
                best["adamw"] = (lr, evals)
        adamw_lr = best["adamw"][0]
        for lr in args.muon_lrs.split(","):
            evals, _, s = run(args.binary, recipe, ["optim.name=muon", f"optim.lr={lr}", f"optim.muon.adamw.lr={adamw_lr}",
                                                    "optim.muon.adamw.betas=[0.9,0.95]"], workdir, f"{data}-muon-{lr}")
            if "muon" not in best or evals[-1][1] < best["muon"][1][-1][1]:
                best["muon"] = (lr, evals)
        target = best["adamw"][1][-1][1]
        for name in ("adamw", "muon"):
            lr, evals = best[name]
            reach = steps_to_reach(evals, target)
            share = f"{reach / args.steps:.2f}x" if reach else "not reached"
            print(f"| {data} | {name} | {lr} | {evals[-1][1]:.4f} | {reach or '-'} | {share} |")
            curves[(data, name)] = evals
    print("\nEval loss curves (step: loss):\n")
    for (data, name), evals in curves.items():
        print(f"- {data}, {name}: " + ", ".join(f"{s}: {l:.3f}" for s, l in evals))


def moe_balance(args, workdir):
    recipe = (f"run: {{name: moe-bench, threads: 2, seed: 0}}\n"
              f"model: {{vocab_size: 256, seq_len: 64, n_layer: 2, n_head: 4, d_model: 64, "
              f"moe: {{experts: 8, top_k: 2, capacity_factor: 0}}}}\n" + DATA["tinyshakespeare"] +
              f"train: {{per_device_batch_size: 8, max_steps: {args.moe_steps}, log_every: 1, eval_steps: 16}}\n"
              "optim: {lr: 3e-3, schedule: {warmup_steps: 10}}\nmetrics: {progress: off}\n")
    print(f"\n| balancing ({args.moe_steps} steps, 8 experts, top 2) | load max/mean over the run | over the last "
          "quarter | eval loss |")
    print("|---|---:|---:|---:|")
    for name, sets in (("none", ["model.moe.aux_loss_coef=0"]), ("aux_loss (coef 0.01)", []),
                       ("bias (rate 0.001)", ["model.moe.balance=bias"])):
        _, lines, s = run(args.binary, recipe, sets, workdir, "moe-" + name.split()[0])
        ratios = [x["moe_load_max_mean"] for x in lines if "moe_load_max_mean" in x]
        quarter = ratios[-len(ratios) // 4:]
        print(f"| {name} | {sum(ratios) / len(ratios):.3f} | {sum(quarter) / len(quarter):.3f} | {s['eval_loss']:.4f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", default="build/gputrain")
    ap.add_argument("--data", default="tinyshakespeare,synthetic")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--eval-every", type=int, default=25)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--adamw-lrs", default="3e-4,6e-4,1e-3,3e-3,6e-3")
    ap.add_argument("--muon-lrs", default="0.01,0.02,0.05,0.1")
    ap.add_argument("--moe-steps", type=int, default=400)
    ap.add_argument("--skip", default="", help="comma-separated: convergence, moe")
    args = ap.parse_args()
    print(provenance(args.binary))
    with tempfile.TemporaryDirectory() as workdir:
        if "convergence" not in args.skip:
            convergence(args, workdir)
        if "moe" not in args.skip:
            moe_balance(args, workdir)


if __name__ == "__main__":
    main()
