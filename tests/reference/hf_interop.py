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
  hf_interop.py save MODEL_DIR TOKENS OUT SPEC_JSON
      SPEC_JSON: {"class": "LlamaForCausalLM" | "Qwen2ForCausalLM" | "MistralForCausalLM" |
      "GPT2LMHeadModel", "config": {config class keyword arguments}, "dtype": "bfloat16",
      "max_shard_size": "200KB"}. Builds that model with its real config class, random
      (vectors too), casts it to dtype, saves it sharded at max_shard_size, and writes the
      logits of the saved folder (loaded back in float32, eager attention) on TOKENS to OUT.
  hf_interop.py documents MODEL_DIR TOKENS OUT SPEC_JSON
      As save, but TOKENS also holds "lengths" (int64): the int64 "tokens" [1, N] are documents of
      those lengths back to back, and OUT gets the "logits" [1, N, vocab] of each document run
      alone (a batch of one, positions from 0), concatenated.
  hf_interop.py rope - - OUT SPEC_JSON
      Writes transformers' inverse frequencies and attention scaling for the config of
      SPEC_JSON ("inv_freq", "attention_scaling") to OUT.
  hf_interop.py tokenize MODEL_DIR TEXT_FILE OUT
      Writes the ids AutoTokenizer.from_pretrained(MODEL_DIR) gives the text of TEXT_FILE (as a JSON
      list) to OUT; prints the tokenizer's class.
  hf_interop.py generate MODEL_DIR PROMPT_JSON OUT MAX_NEW_TOKENS
      Greedy generate() (fp32, eager attention, the folder's generation_config.json) from the ids
      of the JSON list PROMPT_JSON; writes the new ids (the end-of-text one included) as JSON to OUT.
  hf_interop.py textloss MODEL_DIR TEXT_FILE OUT SEQ_LEN [DTYPE]
      The mean loss per byte over every window of the byte-level TEXT_FILE (windows of SEQ_LEN + 1
      bytes at a stride of SEQ_LEN); writes {"loss", "tokens", "windows"} as JSON to OUT. A
      bitsandbytes 4-bit folder is loaded in 4 bits as it is stored (see bnb4). DTYPE bfloat16: the
      model in bf16 and a 4-bit base's products in bf16 (bnb_4bit_compute_dtype=bfloat16); else float32.
  hf_interop.py warpers - LOGITS OUT TEMPERATURE TOP_K TOP_P
      Applies transformers' Temperature, TopK (k > 0) and TopP (p < 1) logits warpers to the
      "logits" of LOGITS and writes them as "filtered" to OUT.
  hf_interop.py peft BASE_DIR TOKENS OUT ADAPTER_DIR [QUANT_TYPE]
      Loads BASE_DIR, puts the PEFT adapter of ADAPTER_DIR on it (PeftModel.from_pretrained)
      and writes its logits on TOKENS to OUT; prints the adapted module count. With QUANT_TYPE
      (nf4 | fp4) the base is loaded in 4 bits as bnb4 does (QLoRA's base).
  hf_interop.py bnb4 MODEL_DIR TOKENS OUT QUANT_TYPE DOUBLE_QUANT
      Loads MODEL_DIR in 4 bits with bitsandbytes (BitsAndBytesConfig: QUANT_TYPE, double
      quantization when DOUBLE_QUANT is 1, float32 compute, on the CPU) and writes its logits on
      TOKENS to OUT; prints the class of its q_proj.
  hf_interop.py save4bit MODEL_DIR TOKENS OUT QUANT_TYPE DOUBLE_QUANT SAVE_DIR
      As bnb4, the weights quantized from bfloat16 (as published 4-bit models are), then saved with
      save_pretrained(SAVE_DIR, max_shard_size="100KB"): a bitsandbytes 4-bit folder. OUT gets the
      logits of SAVE_DIR loaded back by from_pretrained (float32, on the CPU).
  QUANT_TYPE "stored" (peft): MODEL_DIR is such a folder, loaded in 4 bits as it is stored.
"""
import json
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
if mode in ("save", "documents"):
    import transformers
    spec = json.loads(args[0])
    cls = getattr(transformers, spec["class"])
    config = cls.config_class(**spec["config"])
    model = cls(config)
    model.config._attn_implementation = "eager"
    randomize_vectors(model)
    model.to(getattr(torch, spec.get("dtype", "float32")))
    model.save_pretrained(model_dir, max_shard_size=spec.get("max_shard_size", "5GB"))
    reloaded = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager", dtype=torch.float32)
    print(type(reloaded).__name__)
    if mode == "save":
        logits_of(reloaded, tokens_file, out)
        sys.exit(0)
    inputs = load_file(tokens_file)
    reloaded.eval()
    pieces = []
    with torch.no_grad():
        for document in inputs["tokens"][0].split(inputs["lengths"].tolist()):
            pieces.append(reloaded(document.unsqueeze(0)).logits.float())
    save_file({"logits": torch.cat(pieces, 1).contiguous()}, out)
    sys.exit(0)
if mode == "rope":
    import transformers
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    spec = json.loads(args[0])
    config = getattr(transformers, spec["class"]).config_class(**spec["config"])
    rope_type = config.rope_parameters["rope_type"]
    inv_freq, scaling = ROPE_INIT_FUNCTIONS[rope_type](config, torch.device("cpu"), seq_len=spec.get("seq_len"))
    save_file({"inv_freq": inv_freq.double().contiguous(), "attention_scaling": torch.tensor([float(scaling)])}, out)
    sys.exit(0)
if mode == "tokenize":
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model_dir)
    print(type(tok).__name__)
    with open(tokens_file, encoding="utf-8") as f:
        ids = tok(f.read())["input_ids"]
    with open(out, "w") as f:
        json.dump(ids, f)
    sys.exit(0)
def load_4bit(model_dir, quant_type, double_quant, dtype=torch.float32):
    from transformers import BitsAndBytesConfig
    # A 4-bit folder's config.json has its quantization_config (an explicit None would override it).
    quantized = {} if quant_type == "stored" else {"quantization_config": BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type=quant_type, bnb_4bit_use_double_quant=double_quant,
        bnb_4bit_compute_dtype=torch.float32)}
    model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager", dtype=dtype,
                                                 device_map="cpu", **quantized)
    # On CPUs with AVX512-BF16, bitsandbytes' inference shortcut rounds absmax to bf16 and multiplies
    # in bf16 (a CPU-only repacking); off, it dequantizes and multiplies in the compute dtype, as on GPUs.
    for module in model.modules():
        if hasattr(module, "support_avx512bf16_for_cpu"):
            module.support_avx512bf16_for_cpu = False
    # A 4-bit folder loads in its saved dtype whatever dtype= says: the rest of the model made float32.
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point() and p.dtype != dtype:
                p.data = p.data.to(dtype)
    return model


if mode == "bnb4":
    model = load_4bit(model_dir, args[0], args[1] == "1")
    print(type(model.model.layers[0].self_attn.q_proj).__name__)
    logits_of(model, tokens_file, out)
    sys.exit(0)
if mode == "save4bit":
    load_4bit(model_dir, args[0], args[1] == "1", torch.bfloat16).save_pretrained(args[2], max_shard_size="100KB")
    model = load_4bit(args[2], "stored", True)
    print(type(model.model.layers[0].self_attn.q_proj).__name__)
    logits_of(model, tokens_file, out)
    sys.exit(0)
if mode == "peft":
    from peft import PeftModel
    if len(args) > 1:
        base = load_4bit(model_dir, args[1], True)
    else:
        base = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager", dtype=torch.float32)
    model = PeftModel.from_pretrained(base, args[0])
    adapted = sum(1 for name, _ in model.named_modules() if name.endswith("lora_A"))
    print(f"adapted modules: {adapted}")
    logits_of(model, tokens_file, out)
    sys.exit(0)
if mode == "generate":
    model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager", dtype=torch.float32)
    model.eval()
    with open(tokens_file) as f:
        prompt = torch.tensor([json.load(f)], dtype=torch.long)
    with torch.no_grad():
        ids = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                             max_new_tokens=int(args[0]), temperature=None, top_k=None, top_p=None)
    with open(out, "w") as f:
        json.dump(ids[0, prompt.shape[1]:].tolist(), f)
    print(type(model).__name__)
    sys.exit(0)
if mode == "textloss":
    # The mean loss over every window of a byte-level text file: windows of SEQ_LEN + 1 bytes at a
    # stride of SEQ_LEN (consecutive windows share one byte), the tail shorter than a window left out.
    with open(f"{model_dir}/config.json") as f:
        stored_4bit = "quantization_config" in json.load(f)  # a bitsandbytes 4-bit folder, as bnb4 loads it
    dtype = torch.bfloat16 if len(args) > 1 and args[1] == "bfloat16" else torch.float32
    model = load_4bit(model_dir, "stored", True, dtype) if stored_4bit else AutoModelForCausalLM.from_pretrained(
        model_dir, attn_implementation="eager", dtype=dtype)
    for module in model.modules():
        if hasattr(module, "compute_dtype"):  # bitsandbytes' Linear4bit: the products in the model's dtype
            module.compute_dtype = dtype
    model.eval()
    T = int(args[0])
    with open(tokens_file, "rb") as f:
        data = torch.tensor(list(f.read()), dtype=torch.long)
    windows = (len(data) - 1) // T
    total, count = 0.0, 0
    with torch.no_grad():
        for k in range(windows):
            w = data[k * T:k * T + T + 1].unsqueeze(0)
            logits = model(w[:, :-1]).logits.float()
            total += torch.nn.functional.cross_entropy(logits[0], w[0, 1:], reduction="sum").item()
            count += T
    with open(out, "w") as f:
        json.dump({"loss": total / count, "tokens": count, "windows": windows}, f)
    sys.exit(0)
if mode == "warpers":
    from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper
    temperature, top_k, top_p = float(args[0]), int(args[1]), float(args[2])
    warpers = LogitsProcessorList([TemperatureLogitsWarper(temperature)])
    if top_k > 0:
        warpers.append(TopKLogitsWarper(top_k))
    if top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p))
    logits = load_file(tokens_file)["logits"]
    save_file({"filtered": warpers(torch.zeros(logits.shape[0], 1, dtype=torch.long), logits.clone())}, out)
    sys.exit(0)
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
