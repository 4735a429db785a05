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
  chat.jsonl, chat.parquet, chat_ds/, chat.jsonl.zst, pc.parquet
                      the same chat rows (messages; pc.parquet: prompt/completion columns) in each format
  chat_bad.parquet    chat rows, row 8 with the role "bot"
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

    chats = [[{"role": "system", "content": "Be terse."}] * (i % 2) +
             [{"role": "user", "content": f"Question {i}: {paragraphs[i][:80]}"},
              {"role": "assistant", "content": f"Answer {i}: {paragraphs[i + 1][:60]}"}] for i in range(60)]
    with open(os.path.join(out, "chat.jsonl"), "w") as f:
        for c in chats:
            f.write(json.dumps({"messages": c}) + "\n")
    with pa.CompressedOutputStream(os.path.join(out, "chat.jsonl.zst"), "zstd") as f:
        f.write("".join(json.dumps({"messages": c}) + "\n" for c in chats).encode())
    chat_table = pa.table({"id": range(len(chats)), "messages": chats})
    pq.write_table(chat_table, os.path.join(out, "chat.parquet"), row_group_size=16)
    datasets.Dataset.from_dict({"messages": chats}).save_to_disk(os.path.join(out, "chat_ds"))
    pq.write_table(pa.table({"prompt": [c[-2]["content"] for c in chats], "completion": [c[-1]["content"] for c in chats]}),
                   os.path.join(out, "pc.parquet"))
    with open(os.path.join(out, "pc.jsonl"), "w") as f:
        for c in chats:
            f.write(json.dumps({"prompt": c[-2]["content"], "completion": c[-1]["content"]}) + "\n")
    bad = [list(c) for c in chats[:10]]
    bad[7] = [{"role": "bot", "content": "x"}]
    pq.write_table(pa.table({"messages": bad}), os.path.join(out, "chat_bad.parquet"))


if __name__ == "__main__":
    main()
