#!/usr/bin/env python3
"""Peak memory of `gputrain data prepare` on Parquet input as the file grows: the input is
streamed one row group at a time, so the resident set stays flat whatever the file size.

Writes Parquet files of --sizes GB (tinyshakespeare's paragraphs with a running number, so no
two rows are equal; row groups of 100,000 rows, snappy, as pyarrow writes by default otherwise),
prepares each with the gpt2 tokenizer on all cores, and reads the peak resident set of the
process (wait4's ru_maxrss). Prints a Markdown table.
Run: scripts/bench-parquet-memory.sh (builds first).
"""
import argparse
import os
import re
import subprocess
import tempfile
import time

import pyarrow as pa
import pyarrow.parquet as pq

from bench_args import provenance


def write_parquet(path, shared, gigabytes):
    with open(os.path.join(shared, "tinyshakespeare.txt"), encoding="utf-8") as f:
        paragraphs = [p for p in f.read().split("\n\n") if p.strip()]
    schema = pa.schema([("id", pa.int64()), ("text", pa.string())])
    target, written, n = gigabytes * 1e9, 0, 0
    with pq.ParquetWriter(path, schema) as w:
        while written < target:
            texts = [f"{n + i}: {paragraphs[(n + i) % len(paragraphs)]}" for i in range(100_000)]
            w.write_table(pa.table({"id": range(n, n + len(texts)), "text": texts}, schema=schema))
            written += sum(len(t) for t in texts)
            n += len(texts)
    return n, written


def prepare(binary, shared, src, out):
    args = [binary, "data", "prepare", src, "-o", out, "--tokenizer", "gpt2", "--vocab",
            os.path.join(shared, "gpt2", "encoder.json"), "--merges", os.path.join(shared, "gpt2", "vocab.bpe"),
            "--progress", "off", "--overwrite"]
    t0 = time.perf_counter()
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)
    if status != 0:
        raise SystemExit(output)
    tokens = sum(int(x) for x in re.findall(r"(\d+) (?:train|val) tokens", output))
    return time.perf_counter() - t0, usage.ru_maxrss / 1024, tokens


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--shared", required=True)
    ap.add_argument("--sizes", type=float, nargs="+", default=[0.05, 0.3, 1.2])
    a = ap.parse_args()
    print(provenance(a.binary))
    print("\n| Parquet text | file size | rows | row groups | tokens | seconds | peak RSS |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for gb in a.sizes:
        with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as tmp:
            src = os.path.join(tmp, "big.parquet")
            rows, text_bytes = write_parquet(src, a.shared, gb)
            groups = pq.ParquetFile(src).num_row_groups
            seconds, rss_mb, tokens = prepare(a.binary, a.shared, src, os.path.join(tmp, "out"))
            print(f"| {text_bytes / 1e9:.2f} GB | {os.path.getsize(src) / 1e9:.2f} GB | {rows:,} | {groups} | "
                  f"{tokens / 1e6:.0f}M | {seconds:.0f} | {rss_mb:.0f} MiB |", flush=True)


if __name__ == "__main__":
    main()
