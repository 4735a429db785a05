"""Reference for gputrain's preference objectives: TRL's own trainers on the same model, tokenizer and pairs.

usage:
  preference_reference.py base TOKENIZER_JSON MODEL_DIR
      Saves a tiny random LlamaForCausalLM (seed 0, float32, vocab of the tokenizer) and the tokenizer
      (PreTrainedTokenizerFast, <s> / </s>) to MODEL_DIR.
  preference_reference.py train MODEL_DIR PAIRS_JSONL CASES_JSON OUT_JSON
      For each case of the JSON list CASES_JSON ({"objective": dpo | orpo | simpo, "steps", "lr", "beta",
      "loss", "label_smoothing", "simpo_gamma", "sft_weight"}), trains MODEL_DIR with TRL (dpo: DPOTrainer,
      orpo: ORPOTrainer, simpo: CPOTrainer with loss_type simpo) on every pair of PAIRS_JSONL per step:
      float32 (bf16 off), plain SGD at the case's lr, a constant schedule, no clipping, no dropout. Writes
      each case's list of steps' logged metrics (loss, rewards/*, logps/*) as a JSON list to OUT_JSON.
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


def train(model_dir, pairs_file, settings):
    objective = settings["objective"]
    rows = [json.loads(line) for line in open(pairs_file, encoding="utf-8") if line.strip()]
    dataset = Dataset.from_list(rows)
    model = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    model.config._attn_implementation = "eager"
    tok = PreTrainedTokenizerFast.from_pretrained(model_dir)
    common = dict(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=len(rows), max_steps=settings["steps"],
                  learning_rate=settings["lr"], lr_scheduler_type="constant", optim="sgd", weight_decay=0.0,
                  max_grad_norm=0.0, logging_steps=1, save_strategy="no", report_to=[], seed=0, use_cpu=True,
                  beta=settings["beta"], bf16=False)
    if objective == "dpo":
        from trl import DPOConfig, DPOTrainer
        args = DPOConfig(**common, loss_type=[settings.get("loss", "sigmoid")],
                         label_smoothing=settings.get("label_smoothing", 0.0), max_length=None)
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
    elif mode == "train":
        cases = json.loads(open(sys.argv[4], encoding="utf-8").read())
        results = [train(sys.argv[2], sys.argv[3], case) for case in cases]
        with open(sys.argv[5], "w", encoding="utf-8") as f:
            json.dump(results, f)
    else:
        sys.exit(f"unknown mode {mode}")
