#!/usr/bin/env python3
"""Each rank's peak resident memory over its whole life (start-up included) under ZeRO-3, against the
model's fp32 size: what issue 56 asks ("no rank ever holds the whole model"). Runs `gputrain run
--nproc-per-node N` of a GPT-2-shaped model (--layers x --d, --vocab 50304) for 3 steps with the default settings, and the
same run with a 1-block, 16-wide model; each worker pauses at the failpoint train.done, where the
kernel's VmHWM (its peak resident set since it started) is read from /proc, then goes on. Start-up
is process start to the first step (the failpoint train.start, passed as each worker reaches it).
The peak up to the first step (building and reading the weights) is read there too. Random init,
model.init_from of a Hugging Face folder saved by transformers (--hf), and the random run resumed
from its checkpoint (--resume); and the random run with its optimizer state in a file
(--nvme also|only: parallel.offload_optimizer nvme; under --precision bf16 the fp32 weight shards go
to that file too). Prints a
Markdown table (docs/benchmarks.md). Run from the repo root with the test venv's python.
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bench_args import provenance

RECIPE = """model: {{vocab_size: {vocab}, seq_len: 64, n_layer: {layers}, n_head: {heads}, d_model: {d}}}
data: {{train: {{format: synthetic, synthetic: {{kind: uniform}}}}}}
train: {{per_device_batch_size: 1, max_steps: 3, log_every: 1, eval_every: 0}}
optim: {{name: {optim}, lr: 0.001, sgd: {{momentum: 0}}}}
parallel: {{zero: 3}}
checkpoint: {{every: 0, at_end: false}}
metrics: {{progress: off}}
"""


def wait_reached(folder, name, count, proc):
    """The pids paused at failpoint `name` once `count` of them are there (None if the run ended)."""
    while True:
        pids = [int(f.name.split(".")[-2]) for f in folder.glob(f"{name}.*.reached")]
        if len(pids) >= count:
            return pids
        if proc.poll() is not None:
            return None
        time.sleep(0.05)


def vm_hwm_mb(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmHWM for {pid}")


def measure(binary, recipe, nproc, out, sets, overwrite=True):
    """Max over the ranks of the peak RSS (MiB) up to the first step and over the whole life, seconds from
    launch to every rank's first step, and the median step time (s)."""
    with tempfile.TemporaryDirectory() as fp:
        env = dict(os.environ, GPUTRAIN_FAILPOINTS="train.start=pause;train.done=pause", GPUTRAIN_FAILPOINT_DIR=fp)
        args = [binary, "run", str(recipe), "--output-dir", str(out), "--nproc-per-node", str(nproc)]
        args += ["--overwrite"] if overwrite else []
        for s in sets:
            args += ["--set", s]
        t0 = time.monotonic()
        log = open(f"{out}.log", "w")
        proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)
        started = wait_reached(Path(fp), "train.start", nproc, proc)
        if started is None:
            raise SystemExit(Path(f"{out}.log").read_text())
        startup = time.monotonic() - t0
        start_peak = max(vm_hwm_mb(p) for p in started)
        (Path(fp) / "train.start.release").touch()
        pids = wait_reached(Path(fp), "train.done", nproc, proc)
        if pids is None:
            raise SystemExit(Path(f"{out}.log").read_text())
        peak = max(vm_hwm_mb(p) for p in pids)
        (Path(fp) / "train.done.release").touch()
        if proc.wait() != 0:
            raise SystemExit(Path(f"{out}.log").read_text())
    steps = [json.loads(line)["step_ms"] / 1000 for line in Path(out, "metrics.jsonl").read_text().splitlines()]
    return start_peak, peak, startup, statistics.median(steps[-3:])


def hf_folder(tmp, vocab, layers, d, heads):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    config = GPT2Config(vocab_size=vocab, n_positions=64, n_embd=d, n_layer=layers, n_head=heads)
    torch.manual_seed(0)
    folder = Path(tmp) / "hf"
    GPT2LMHeadModel(config).save_pretrained(folder, max_shard_size="400MB")
    return folder


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="build/gputrain")
    ap.add_argument("--nproc", type=int, nargs="+", default=[4])
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--d", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--optim", nargs="+", default=["sgd"])
    ap.add_argument("--hf", action="store_true", help="also start from a Hugging Face folder (model.init_from)")
    ap.add_argument("--resume", action="store_true", help="also resume the random run from its checkpoint")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                    help="precision.mode (bf16: units gathered in bf16, and under --nvme the fp32 shards filed)")
    ap.add_argument("--set", dest="sets", nargs="*", default=[], metavar="KEY=VALUE",
                    help="recipe overrides for every run (e.g. run.cpu_malloc_cache=false); defaults otherwise")
    ap.add_argument("--nvme", choices=["also", "only"],
                    help="the random run with the optimizer state in a file too, or that run only")
    a = ap.parse_args()
    heads = a.d // 64
    print(provenance(a.binary))
    print(f"GPT {a.layers} layers, d_model {a.d}, vocabulary {a.vocab}, seq_len 64, batch 1, ZeRO-3 over Gloo, "
          f"precision {a.precision}; "
          "peak = the largest rank's VmHWM over its life; 'above' = minus the same run's with a 1-block, "
          "16-wide model\n")
    print("| init | optimizer | processes | parameters | fp32 model MiB | peak MiB/rank | tiny run MiB/rank | "
          "above / fp32 model | until step 1: above / fp32 model | start-up s | step s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        inits = [("random", [])]
        if a.hf:
            inits.append(("HF folder", [f"model.init_from={hf_folder(tmp, a.vocab, a.layers, a.d, heads)}"]))
        for optim in a.optim:
            for nproc in a.nproc:
                recipe = Path(tmp) / "r.yaml"
                recipe.write_text(RECIPE.format(vocab=a.vocab, layers=a.layers, heads=heads, d=a.d, optim=optim))
                tiny = Path(tmp) / "tiny.yaml"
                tiny.write_text(RECIPE.format(vocab=a.vocab, layers=1, heads=1, d=16, optim=optim))
                precision = [f"precision.mode={a.precision}", *a.sets]
                base_start, base, _, _ = measure(a.binary, tiny, nproc, Path(tmp) / "tiny", precision)
                runs = list(inits)
                if a.resume:  # the random run again, then resumed from the checkpoint it ends with
                    runs = [("random", ["checkpoint.at_end=true"]), *inits[1:],
                            ("resumed", ["train.max_steps=6"])]
                if a.nvme:
                    nvme = ("random, state on disk", ["parallel.offload_optimizer=nvme",
                                                       f"parallel.offload_dir={tmp}/state"])
                    runs = [nvme] if a.nvme == "only" else [*runs, nvme]
                folders = {"HF folder": "hf", "random, state on disk": "nvme"}
                for name, sets in runs:
                    out = Path(tmp) / f"{folders.get(name, 'run')}-{nproc}"
                    start, peak, startup, step = measure(a.binary, recipe, nproc, out, precision + sets,
                                                         name != "resumed")
                    params = int(json.loads((out / "summary.json").read_text()).get("parameters", 0))
                    model_mb = params * 4 / 2**20
                    print(f"| {name} | {optim} | {nproc} | {params / 1e6:.0f}M | {model_mb:.0f} | {peak:.0f} | "
                          f"{base:.0f} | {(peak - base) / model_mb:.2f} | {(start - base_start) / model_mb:.2f} | "
                          f"{startup:.1f} | {step:.1f} |", flush=True)


if __name__ == "__main__":
    main()
