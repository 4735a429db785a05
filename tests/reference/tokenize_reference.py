"""Reference ids for the tokenizer tests: HF tokenizers for a tokenizer.json
(special tokens in the text split as ordinary text, no post-processor), the
sentencepiece library for a .model. Texts arrive as bytes and are decoded as
Python does with errors="replace".

usage: tokenize_reference.py TOKENIZER INPUT OUTPUT
  INPUT  a JSON list of base64-encoded byte strings, or any other file (read whole)
  OUTPUT a JSON list with one list of ids per text
usage: tokenize_reference.py --decode TOKENIZER INPUT OUTPUT
  INPUT  a JSON list of id lists
  OUTPUT a JSON list of the texts the library decodes them to (special tokens kept)
"""
import base64
import json
import sys


def decode():
    tokenizer, src, dst = sys.argv[2:5]
    with open(src) as f:
        ids = json.load(f)
    if tokenizer.endswith(".json"):
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(tokenizer)
        texts = tok.decode_batch(ids, skip_special_tokens=False)
    else:
        import sentencepiece

        texts = sentencepiece.SentencePieceProcessor(model_file=tokenizer).decode(ids)
    with open(dst, "w") as f:
        json.dump(texts, f)


def main():
    if sys.argv[1] == "--decode":
        return decode()
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
