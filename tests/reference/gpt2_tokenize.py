"""Reference GPT-2 encoder for the tests: HF tokenizers' byte-level BPE
loaded from the same encoder.json + vocab.bpe our C++ tokenizer reads.

usage: gpt2_tokenize.py ENCODER_JSON MERGES INPUT OUTPUT
  INPUT  a JSON list of strings, or (for any other extension) one text file
  OUTPUT a JSON list with one list of ids per string
"""
import json
import sys

from tokenizers import Tokenizer, models, pre_tokenizers


def main():
    vocab, merges, src, dst = sys.argv[1:5]
    tok = Tokenizer(models.BPE.from_file(vocab, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    if src.endswith(".json"):
        with open(src, encoding="utf-8") as f:
            texts = json.load(f)
    else:
        with open(src, encoding="utf-8") as f:
            texts = [f.read()]
    with open(dst, "w") as f:
        json.dump([e.ids for e in tok.encode_batch(texts)], f)


if __name__ == "__main__":
    main()
