#!/usr/bin/env python3
"""Tokenizer speed: `gputrain data prepare --threads 1` against HF tokenizers
(and the sentencepiece library for a .model) on one core, same documents.

The documents are tinyshakespeare's paragraphs repeated --repeat times, plus
a multilingual set (tests' varied text), as JSONL. gputrain's figure is end
to end (reading the tokenizer file, encoding, writing shards); the
references' is encoding alone (RAYON_NUM_THREADS=1, encode_batch without
special tokens). Prints a Markdown table of MB/s per core.
Run: scripts/bench-tokenizers.sh (builds, installs the references, makes the tokenizer files).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

from bench_args import provenance  # noqa: E402

MULTILINGUAL = [
    "na\u00efve caf\u00e9 r\u00e9sum\u00e9 \u2014 \u201cquotes\u201d", "\u4e2d\u6587\u5b57\u7b26\u6d4b\u8bd5\uff0c\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",
    "Cyrillic \u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440, Arabic \u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "Hindi \u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e, Thai \u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22",
    "def f(x):\n    return {'a': [1, 2], \"b\": None}  # 3.14159\n", "Emoji \U0001F600\U0001F44D\U0001F3FD 1234567890",
]


def documents(shared, repeat):
    with open(os.path.join(shared, "tinyshakespeare.txt"), encoding="utf-8") as f:
        paragraphs = [p for p in f.read().split("\n\n") if p.strip()]
    docs = []
    for i in range(repeat):
        docs += paragraphs
        docs += [f"{m} {i}" for m in MULTILINGUAL] * 50
    return docs


def gputrain_mb_s(binary, jsonl, tokenizer, out):
    r = subprocess.run([binary, "data", "prepare", jsonl, "-o", out, "--tokenizer", tokenizer, "--threads", "1",
                        "--val-fraction", "0", "--progress", "off", "--overwrite"], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(r.stdout + r.stderr)
    return float(re.search(r"s \(([0-9.]+) MB/s\)", r.stdout).group(1))


def reference_mb_s(tokenizer, docs):
    nbytes = sum(len(d.encode("utf-8")) for d in docs)
    if tokenizer.endswith(".model"):
        import sentencepiece

        sp = sentencepiece.SentencePieceProcessor(model_file=tokenizer)
        t0 = time.perf_counter()
        sp.encode(docs, num_threads=1)
    else:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(tokenizer)
        tok.encode_special_tokens = True
        t0 = time.perf_counter()
        tok.encode_batch(docs, add_special_tokens=False)
    return nbytes / 1e6 / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--tokenizers", required=True, help="the folder make_tokenizers.py wrote")
    ap.add_argument("--shared", required=True)
    ap.add_argument("--repeat", type=int, default=8)
    a = ap.parse_args()
    docs = documents(a.shared, a.repeat)
    rows = [("GPT-2 (ByteLevel)", "gpt2/tokenizer.json"), ("Llama 3 layout (Split + ByteLevel)", "llama3/tokenizer.json"),
            ("Qwen2 layout (NFC, Split)", "qwen2/tokenizer.json"),
            ("Mistral layout (Metaspace, byte_fallback)", "mistral/tokenizer.json"),
            ("Gemma layout (Replace normalizer)", "gemma/tokenizer.json"),
            ("SentencePiece .model (Mistral v1)", "sentencepiece/tokenizer.model.v1.model")]
    with tempfile.TemporaryDirectory() as tmp:
        jsonl = os.path.join(tmp, "docs.jsonl")
        with open(jsonl, "w", encoding="utf-8") as f:
            for d in docs:
                f.write(json.dumps({"text": d}) + "\n")
        size = os.path.getsize(jsonl) / 1e6
        print(provenance(a.binary))
        print(f"\n{len(docs)} documents, {size:.1f} MB of JSONL, one core each side\n")
        print("| tokenizer | gputrain data prepare, MB/s | reference library, MB/s | ratio |")
        print("|---|---:|---:|---:|")
        for name, rel in rows:
            path = os.path.join(a.tokenizers, rel)
            ours = gputrain_mb_s(a.binary, jsonl, path, os.path.join(tmp, "out"))
            theirs = reference_mb_s(path, docs)
            ref = "sentencepiece" if rel.endswith(".model") else "HF tokenizers"
            print(f"| {name} | {ours:.1f} | {theirs:.1f} ({ref}) | {ours / theirs:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
