// LoRA (Hu et al. 2021, "Low-Rank Adaptation of Large Language Models"): the
// targeted Linear layers of a frozen model gain a trainable low-rank update,
//   y = x W^T + b + (alpha / r) * dropout(x) A^T B^T,
// A [r, in] Kaiming-uniform (as PEFT), B [out, r] zero, so training starts
// exactly at the base model's outputs. Only the adapters get gradients and
// optimizer state. The adapters are parameters of the Linear they adapt
// ("transformer.h.0.attn.c_attn.lora_A"), so pipeline stages, checkpoints and
// data parallelism see them like any other parameter.
#pragma once
#include <string>
#include <vector>

#include "config/settings.h"
#include "util/named_tensor.h"

namespace gputrain {

struct GptImpl;

// The module paths (below transformer.h.<i>.) that `target` adapts.
const char* lora_target_module(LoraTarget target);

// Adds adapters to every block's targeted Linears and freezes every other
// parameter (requires_grad false). Called by the model's constructor when
// model.lora.rank > 0.
void add_lora_adapters(GptImpl& model, const LoraSettings& lora);

// While alive, every adapter of `model` is skipped: its forwards are the frozen base's (DPO's
// reference model under LoRA, with no second copy of the weights).
class AdaptersOff {
 public:
  explicit AdaptersOff(GptImpl& model);
  ~AdaptersOff();
  AdaptersOff(const AdaptersOff&) = delete;
  AdaptersOff& operator=(const AdaptersOff&) = delete;

 private:
  GptImpl& model_;
};

// lora_A / lora_B parameters.
bool is_lora_parameter(const std::string& name);

// `weights` (a LoRA model's, by name) with each adapted weight replaced by
// W + (alpha / r) B A and the adapters left out: a plain model's weights.
std::vector<NamedTensor> merge_lora(const std::vector<NamedTensor>& weights, const LoraSettings& lora);

// A fingerprint of the frozen base weights (CRC-32C of their float32 bytes
// in order): an adapters-only checkpoint resumes only on the base it was trained on.
std::string lora_base_fingerprint(const std::vector<NamedTensor>& weights);

}  // namespace gputrain
