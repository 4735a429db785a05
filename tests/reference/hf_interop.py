"""Reference check of gputrain's Hugging Face export and import with transformers.

usage:
  hf_interop.py logits MODEL_DIR TOKENS OUT
      Loads MODEL_DIR (written by `gputrain export --format hf`) with
      AutoModelForCausalLM.from_pretrained (GPT2LMHeadModel or
      LlamaForCausalLM, as its config.json says), runs it on the int64
      "tokens" tensor of the safetensors file TOKENS (eval mode, fp32, CPU)
      and writes the "logits" to the safetensors file OUT; prints the class name.
  hf_interop.py save-gpt2 MODEL_DIR TOKENS OUT N_EMBD N_LAYER N_HEAD VOCAB N_POSITIONS TIED
  hf_interop.py save-llama MODEL_DIR TOKENS OUT HIDDEN LAYERS HEADS KV_HEADS INTERMEDIATE VOCAB TIED BIAS ROPE_THETA RMS_EPS
      Builds a randomly initialized GPT2LMHeadModel / LlamaForCausalLM of
      that shape (biases and norm scales randomized too, so every tensor
      matters), saves it with save_pretrained(MODEL_DIR) and writes its
      logits on TOKENS to OUT.
"""
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM


def logits_of(model, tokens_file, out):
    tokens = load_file(tokens_file)["tokens"]
    model.eval()
    with torch.no_grad():
        logits = model(tokens).logits.float().contiguous()
    save_file({"logits": logits}, out)


def randomize_vectors(model):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                is_scale = "norm" in name or ".ln_" in name or "ln_f" in name
                p.copy_(torch.randn_like(p) * 0.1 + (1.0 if is_scale and name.endswith("weight") else 0.0))


mode = sys.argv[1]
model_dir, tokens_file, out = sys.argv[2:5]
args = sys.argv[5:]
torch.manual_seed(0)
if mode == "logits":
    model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager")
    print(type(model).__name__)
    logits_of(model, tokens_file, out)
    sys.exit(0)
if mode == "save-gpt2":
    n_embd, n_layer, n_head, vocab, n_positions = (int(v) for v in args[:5])
    config = GPT2Config(vocab_size=vocab, n_positions=n_positions, n_embd=n_embd, n_layer=n_layer, n_head=n_head,
                        tie_word_embeddings=args[5] == "1", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(config)
elif mode == "save-llama":
    hidden, layers, heads, kv_heads, intermediate, vocab = (int(v) for v in args[:6])
    bias = args[7] == "1"
    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                         max_position_embeddings=64, tie_word_embeddings=args[6] == "1", attention_bias=bias,
                         mlp_bias=bias, rope_theta=float(args[8]), rms_norm_eps=float(args[9]))
    model = LlamaForCausalLM(config)
else:
    sys.exit(f"unknown mode {mode}")
model.config._attn_implementation = "eager"
randomize_vectors(model)
model.save_pretrained(model_dir)
logits_of(model, tokens_file, out)
