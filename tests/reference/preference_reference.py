"""Reference for gputrain's preference objectives: TRL's own trainers on the same model, tokenizer and pairs.

usage:
  preference_reference.py base TOKENIZER_JSON MODEL_DIR
      Saves a tiny random LlamaForCausalLM (seed 0, float32, vocab of the tokenizer) and the tokenizer
      (PreTrainedTokenizerFast, <s> / </s>) to MODEL_DIR.
  preference_reference.py likely MODEL_DIR PAIRS_JSONL OUT_DIR
      Trains MODEL_DIR on every pair's chosen and rejected completions (next-token loss on the completion
      tokens, Adam) until each completion's mean token log-probability is above -0.5 (above -ln 2, where
      ORPO's log(1 - p) takes its other branch), and saves it with the tokenizer to OUT_DIR.
  preference_reference.py train MODEL_DIR PAIRS_JSONL CASES_JSON OUT_JSON
      For each case of the JSON list CASES_JSON ({"objective": dpo | orpo | simpo, "steps", "lr", "beta",
      "loss", "label_smoothing", "simpo_gamma", "sft_weight", and optionally "model" (another MODEL_DIR),
      "bf16", "dropout" (the attention dropout, TRL's disable_dropout off), "precompute" (DPO's
      precompute_ref_log_probs), "batch" (pairs per micro-batch), "accumulation", "log_every"}), trains
      the model with TRL (dpo: DPOTrainer, orpo: ORPOTrainer, simpo: CPOTrainer with loss_type simpo) on
      every pair of PAIRS_JSONL per step: float32 unless bf16 (then autocast, as TRL runs it), plain SGD at
      the case's lr, a constant schedule, no clipping, no dropout unless asked. Writes each case's list of
      logged metrics (loss, rewards/*, logps/*) as a JSON list to OUT_JSON.
"""
import json
import sys
import tempfile

import torch
from datasets import Dataset
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, TrainerCallback


def save_base(tokenizer_json, model_dir):
    tok = PreTrainedTokenizerFast(tokenizer_file=tokenizer_json, bos_token="<s>", eos_token="</s>",
                                  pad_token="</s>", unk_token="<unk>")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, tie_word_embeddings=False)
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # weights large enough that the steps move the metrics visibly
        for p in model.parameters():
            p.normal_(0.0, 0.2) if p.dim() > 1 else p.uniform_(0.8, 1.2)
    model.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)


class Collect(TrainerCallback):
    def __init__(self):
        self.steps = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.steps.append({k: v for k, v in logs.items() if k == "loss" or "/" in k})


def read_pairs(pairs_file):
    return [json.loads(line) for line in open(pairs_file, encoding="utf-8") if line.strip()]


def save_likely(model_dir, pairs_file, out_dir):
    model = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    tok = PreTrainedTokenizerFast.from_pretrained(model_dir)
    rows, completions = [], []  # (ids, first completion position)
    for pair in read_pairs(pairs_file):
        prompt = tok(pair["prompt"])["input_ids"]
        for key in ("chosen", "rejected"):
            ids = prompt + tok(pair[key], add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
            rows.append((torch.tensor([ids]), len(prompt)))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(500):
        means = []
        optimizer.zero_grad()
        for ids, first in rows:
            logps = torch.log_softmax(model(ids).logits[0, :-1], -1).gather(-1, ids[0, 1:, None])[first - 1:, 0]
            (-logps.mean()).backward()
            means.append(logps.mean().item())
        if min(means) > -0.5:
            break
        optimizer.step()
    else:
        sys.exit(f"the completions stayed unlikely: mean log-probabilities {means}")
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)


def train(model_dir, pairs_file, settings):
    objective = settings["objective"]
    rows = read_pairs(pairs_file)
    dataset = Dataset.from_list(rows)
    model_dir = settings.get("model", model_dir)
    model = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32,
                                             attention_dropout=settings.get("dropout", 0.0))
    model.config._attn_implementation = "eager"
    tok = PreTrainedTokenizerFast.from_pretrained(model_dir)
    bf16 = settings.get("bf16", False)
    common = dict(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=settings.get("batch", len(rows)),
                  gradient_accumulation_steps=settings.get("accumulation", 1), max_steps=settings["steps"],
                  learning_rate=settings["lr"], lr_scheduler_type="constant", optim="sgd", weight_decay=0.0,
                  max_grad_norm=0.0, logging_steps=settings.get("log_every", 1), save_strategy="no", report_to=[],
                  seed=0, use_cpu=True, beta=settings["beta"], bf16=bf16,
                  disable_dropout=settings.get("dropout", 0.0) == 0.0)
    if objective == "dpo":
        from trl import DPOConfig, DPOTrainer
        args = DPOConfig(**common, loss_type=[settings.get("loss", "sigmoid")],
                         label_smoothing=settings.get("label_smoothing", 0.0), max_length=None,
                         precompute_ref_log_probs=settings.get("precompute", False))
        trainer = DPOTrainer(model=model, args=args, train_dataset=dataset, processing_class=tok)
    elif objective == "orpo":
        from trl.experimental.orpo import ORPOConfig, ORPOTrainer
        args = ORPOConfig(**common)
        trainer = ORPOTrainer(model=model, args=args, train_dataset=dataset, processing_class=tok)
    else:
        from trl.experimental.cpo import CPOConfig, CPOTrainer
        args = CPOConfig(**common, loss_type="simpo", cpo_alpha=settings.get("sft_weight", 0.0),
                         simpo_gamma=settings.get("simpo_gamma", 0.5),
                         label_smoothing=settings.get("label_smoothing", 0.0))
        trainer = CPOTrainer(model=model, args=args, train_dataset=dataset, processing_class=tok)
    collect = Collect()
    trainer.add_callback(collect)
    trainer.train()
    return collect.steps


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "base":
        save_base(sys.argv[2], sys.argv[3])
    elif mode == "likely":
        save_likely(sys.argv[2], sys.argv[3], sys.argv[4])
    elif mode == "train":
        cases = json.loads(open(sys.argv[4], encoding="utf-8").read())
        results = [train(sys.argv[2], sys.argv[3], case) for case in cases]
        with open(sys.argv[5], "w", encoding="utf-8") as f:
            json.dump(results, f)
    else:
        sys.exit(f"unknown mode {mode}")
