"""A chat fine-tune with one conversation per window (`packing: padded`, what unpacked batches are)
against packed windows with document attention (`packing: documents, document_attention: true`):
trained tokens per second (the replies' tokens, which take the loss) and the whole-set eval loss after
the same number of trained tokens (docs/benchmarks.md, "Packed documents").

The conversations are tinyshakespeare's paragraphs in pairs (the user says one, the assistant answers
with the next), prepared with `gputrain data prepare --format chat` and a Qwen2-style tokenizer (ChatML).
Both take --steps steps over about the same trained tokens: the packed run --batch windows per step,
the padded run as many windows as hold as many trained tokens (measured by short probes first). Both evaluate the same held-out conversations the same
way (`gputrain eval`: every window, packed with document attention, so each conversation alone).
Usage: packed_documents.py [--binary build/gputrain] [--tokenizer DIR] [--steps 60] [--batch 2] [--seq 512]
"""
import argparse
import glob
import json
import subprocess
import tempfile
from pathlib import Path

from bench_args import add_model_args, provenance

REPO = Path(__file__).resolve().parent.parent


def conversations(text, pairs):
    """JSON lines of `pairs` conversations: user = a paragraph, assistant = the next one."""
    paragraphs = [p.strip() for p in text.split("\n\n") if p.strip()]
    rows = []
    for i in range(0, min(len(paragraphs) - 1, 2 * pairs), 2):
        rows.append(json.dumps({"messages": [{"role": "user", "content": paragraphs[i]},
                                             {"role": "assistant", "content": paragraphs[i + 1]}]}))
    return "\n".join(rows) + "\n"


def run(binary, args):
    r = subprocess.run([binary] + args, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"gputrain {args[0]} failed ({r.returncode}):\n{r.stderr[-3000:]}")
    return r.stdout


def train(binary, recipe, out, sets):
    args = ["run", str(recipe), "--output-dir", str(out), "--overwrite"]
    for key, value in sets.items():
        args += ["--set", f"{key}={value}"]
    run(binary, args)
    lines = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
    summary = json.loads((out / "summary.json").read_text())
    return lines, summary


def main():
    ap = add_model_args(argparse.ArgumentParser(), vocab=130112, seq=512, layers=2, heads=4, d=64)
    ap.add_argument("--tokenizer", help="a folder with a Qwen2-style tokenizer.json (default: the tests' cache)")
    ap.add_argument("--steps", type=int, default=60, help="steps of each run")
    ap.add_argument("--batch", type=int, default=2, help="windows per step of the packed run")
    ap.add_argument("--pairs", type=int, default=3000, help="conversations to prepare")
    a = ap.parse_args()
    tokenizer = a.tokenizer or next(iter(sorted(glob.glob("build/tests/cache/reference_tokenizers-*/qwen2"))), None)
    if not tokenizer:
        raise SystemExit("--tokenizer: no Qwen2-style tokenizer folder (run the chat tests once, or pass one)")
    text = (REPO.parent / "shared/data/tinyshakespeare.txt").read_text()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "chat.jsonl").write_text(conversations(text, a.pairs))
        run(a.binary, ["data", "prepare", str(tmp / "chat.jsonl"), "-o", str(tmp / "chat"), "--format", "chat",
                       "--tokenizer", tokenizer, "--val-fraction", "0.05"])
        recipe = tmp / "r.yaml"
        recipe.write_text(
            "run: {name: packed, threads: 2}\n"
            f"model: {{arch: qwen2, vocab_size: {a.vocab}, seq_len: {a.seq}, n_layer: {a.layers}, "
            f"n_head: {a.heads}, n_kv_head: {a.heads // 2}, d_model: {a.d}}}\n"
            "data:\n  train: {format: tokens, path: chat/train_*.bin}\n"
            "  eval: {format: tokens, path: chat/val_*.bin, packing: documents, document_attention: true}\n"
            f"train: {{per_device_batch_size: {a.batch}, log_every: 1, eval_every: 0}}\n"
            "optim: {lr: 3e-3, schedule: {warmup_steps: 5}}\nmetrics: {progress: off}\n")
        packed_sets = {"data.train.packing": "documents", "data.train.document_attention": "true"}
        padded_sets = {"data.train.packing": "padded"}

        def tokens_per_window(sets):
            lines, _ = train(a.binary, recipe, tmp / "probe", dict(sets, **{"train.max_steps": 4, "optim.schedule.warmup_steps": 0}))
            return lines[-1]["tokens"] / (4.0 * a.batch)

        # The padded run takes as many windows per step as hold the packed run's trained tokens, so both
        # take the same steps over the same tokens (as a padded fine-tune's batch of conversations would).
        padded_batch = max(1, round(a.batch * tokens_per_window(packed_sets) / tokens_per_window(padded_sets)))

        def measured(name, sets):
            lines, summary = train(a.binary, recipe, tmp / name,
                                   dict(sets, **{"train.max_steps": a.steps, "optim.schedule.decay_steps": a.steps}))
            warm = len(lines) // 5  # past the warm-up
            seconds = sum(l["step_ms"] for l in lines[warm:]) / 1000.0
            loss = json.loads(run(a.binary, ["eval", str(tmp / name)]))["loss"]
            return {"batch": sets.get("train.per_device_batch_size", a.batch), "tokens": lines[-1]["tokens"],
                    "rate": (lines[-1]["tokens"] - lines[warm - 1]["tokens"]) / seconds, "eval": loss,
                    "step_s": seconds / (len(lines) - warm)}

        packed = measured("packed", packed_sets)
        padded = measured("padded", dict(padded_sets, **{"train.per_device_batch_size": padded_batch}))
    print(provenance(a.binary))
    print(f"qwen2 {a.layers} x {a.d}, vocab {a.vocab}, seq_len {a.seq}, fp32, CPU, {a.pairs} conversations, "
          f"{a.steps} steps")
    print()
    print("| windows | windows per step | trained tokens | s/step | trained tokens/s | eval loss (whole set) |")
    print("|---|---|---|---|---|---|")
    for name, r in [("one conversation each (`packing: padded`)", padded),
                    ("packed, document attention", packed)]:
        print(f"| {name} | {r['batch']} | {r['tokens']:,} | {r['step_s']:.2f} | {r['rate']:,.0f} | {r['eval']:.4f} |")
    print()
    print(f"packed / padded trained tokens/s: {packed['rate'] / padded['rate']:.2f}x")


if __name__ == "__main__":
    main()
