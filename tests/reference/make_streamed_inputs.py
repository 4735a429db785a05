"""Writes the same documents in every streamed input format data prepare reads, with the libraries
that write them in practice (HF datasets, pyarrow), for tests/unit/data/document_stream_test.cpp.

usage: make_streamed_inputs.py SHARED_DATA_DIR OUT_DIR
  docs.json           the documents, in order (null rows are "")
  d.parquet           row groups of 100 rows; nested columns before the text column; some nulls
  large.parquet       the text as large_string, one row group
  ds/                 datasets' save_to_disk, several .arrow shards
  file.arrow          Arrow's IPC file format (not stream)
  d.jsonl.gz          gzip, written as two concatenated members
  d.jsonl.zst         zstd
  DatasetDict/        datasets' DatasetDict save_to_disk (train/test)
"""
import gzip
import json
import os
import sys

import datasets
import pyarrow as pa
import pyarrow.parquet as pq


def main():
    shared, out = sys.argv[1:3]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(shared, "tinyshakespeare.txt"), encoding="utf-8") as f:
        paragraphs = [p for p in f.read().split("\n\n") if p.strip()][:1500]
    docs = paragraphs + ["caf\u00e9 \u4e2d\u6587 \U0001F600 <|endoftext|>", "last"]
    texts = [None if i % 97 == 5 else d for i, d in enumerate(docs)]  # nulls: empty documents
    with open(os.path.join(out, "docs.json"), "w") as f:
        json.dump([t or "" for t in texts], f)

    table = pa.table({
        "meta": pa.array([{"source": "shk", "n": i} for i in range(len(texts))]),
        "messages": pa.array([[{"role": "user", "content": "x"}]] * len(texts)),
        "content": pa.array(texts, pa.string()),
        "id": pa.array(range(len(texts))),
    })
    pq.write_table(table, os.path.join(out, "d.parquet"), row_group_size=100)
    pq.write_table(table.set_column(2, "content", pa.array(texts, pa.large_string())),
                   os.path.join(out, "large.parquet"))
    ds = datasets.Dataset.from_dict({"id": list(range(len(texts))), "content": texts})
    ds.save_to_disk(os.path.join(out, "ds"), max_shard_size="150KB")
    with pa.OSFile(os.path.join(out, "file.arrow"), "wb") as sink:
        with pa.ipc.new_file(sink, table.schema) as w:
            for batch in table.to_batches(max_chunksize=300):
                w.write_batch(batch)
    lines = [json.dumps({"content": t or ""}) + "\n" for t in texts]
    with open(os.path.join(out, "d.jsonl.gz"), "wb") as f:
        half = len(lines) // 2
        f.write(gzip.compress("".join(lines[:half]).encode()))
        f.write(gzip.compress("\n".join(["", ""]).encode() + "".join(lines[half:]).encode()))  # blank lines
    with pa.CompressedOutputStream(os.path.join(out, "d.jsonl.zst"), "zstd") as f:
        f.write("".join(lines).encode())
    datasets.DatasetDict({"train": ds, "test": ds}).save_to_disk(os.path.join(out, "DatasetDict"))


if __name__ == "__main__":
    main()
