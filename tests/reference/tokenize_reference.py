"""Reference ids for the tokenizer tests: HF tokenizers for a tokenizer.json
(special tokens in the text split as ordinary text, no post-processor), the
sentencepiece library for a .model. Texts arrive as bytes and are decoded as
Python does with errors="replace".

usage: tokenize_reference.py TOKENIZER INPUT OUTPUT
  INPUT  a JSON list of base64-encoded byte strings, or any other file (read whole)
  OUTPUT a JSON list with one list of ids per text
"""
import base64
import json
import sys


def main():
    tokenizer, src, dst = sys.argv[1:4]
    if src.endswith(".json"):
        with open(src) as f:
            texts = [base64.b64decode(t).decode("utf-8", errors="replace") for t in json.load(f)]
    else:
        with open(src, "rb") as f:
            texts = [f.read().decode("utf-8", errors="replace")]
    if tokenizer.endswith(".json"):
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(tokenizer)
        tok.encode_special_tokens = True
        ids = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
    else:
        import sentencepiece

        ids = sentencepiece.SentencePieceProcessor(model_file=tokenizer).encode(texts)
    with open(dst, "w") as f:
        json.dump(ids, f)


if __name__ == "__main__":
    main()
