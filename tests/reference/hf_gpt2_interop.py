"""Reference check of gputrain's GPT-2 export and import with Hugging Face transformers.

usage:
  hf_gpt2_interop.py logits MODEL_DIR TOKENS OUT
      Loads MODEL_DIR (written by `gputrain export --format hf`) with
      GPT2LMHeadModel.from_pretrained, runs it on the int64 "tokens" tensor
      of the safetensors file TOKENS (eval mode, fp32, CPU) and writes the
      "logits" to the safetensors file OUT.
  hf_gpt2_interop.py save MODEL_DIR TOKENS OUT N_EMBD N_LAYER N_HEAD VOCAB N_POSITIONS TIED
      Builds a randomly initialized GPT2LMHeadModel of that shape (biases and
      LayerNorm parameters randomized too, so every tensor matters), saves it
      with save_pretrained(MODEL_DIR) and writes its logits on TOKENS to OUT.
"""
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import GPT2Config, GPT2LMHeadModel


def logits_of(model, tokens_file, out):
    tokens = load_file(tokens_file)["tokens"]
    model.eval()
    with torch.no_grad():
        logits = model(tokens).logits.float().contiguous()
    save_file({"logits": logits}, out)


mode = sys.argv[1]
model_dir, tokens_file, out = sys.argv[2:5]
if mode == "logits":
    model = GPT2LMHeadModel.from_pretrained(model_dir, attn_implementation="eager")
    logits_of(model, tokens_file, out)
elif mode == "save":
    n_embd, n_layer, n_head, vocab, n_positions = (int(v) for v in sys.argv[5:10])
    tied = sys.argv[10] == "1"
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=vocab, n_positions=n_positions, n_embd=n_embd, n_layer=n_layer, n_head=n_head,
                        tie_word_embeddings=tied, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(torch.randn_like(p) * 0.1 + (1.0 if ".ln_" in name or "ln_f" in name else 0.0))
    model.save_pretrained(model_dir)
    logits_of(model, tokens_file, out)
else:
    sys.exit(f"unknown mode {mode}")
