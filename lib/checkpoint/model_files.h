// Model weights in and out of gputrain: model.init_from (start a run from
// Hugging Face GPT-2 / Llama weights or another run's checkpoint) and
// `gputrain export --format hf` (a checkpoint as a directory that
// transformers' GPT2LMHeadModel or LlamaForCausalLM.from_pretrained loads,
// as model.arch says).
#pragma once
#include <filesystem>
#include <string>

#include <torch/nn/module.h>

#include "config/settings.h"

namespace gputrain {

// Replaces `model`'s weights with those at `path`: a gputrain checkpoint
// directory (weights only; the optimizer starts fresh), a directory with
// model.safetensors (or a sharded model.safetensors.index.json) and
// config.json in GPT-2's layout (model.arch gpt) or Llama's (model.arch
// llama), or a single .safetensors file in either layout. Returns a one-line description for the log. DataError on mismatch.
std::string load_initial_weights(torch::nn::Module& model, const ModelSettings& m, const std::string& path);

// `where` may be a checkpoint, a directory of step_<N> checkpoints or a run's
// output directory (its checkpoints/ is used); the newest complete one is chosen.
std::filesystem::path find_checkpoint(const std::filesystem::path& where);

struct ExportResult {
  std::filesystem::path checkpoint;
  int64_t step = 0;
  int64_t tensors = 0;
  std::string architecture;  // GPT2LMHeadModel or LlamaForCausalLM
};
// Writes <out>/model.safetensors and <out>/config.json for GPT2LMHeadModel
// or LlamaForCausalLM (the checkpoint's model.arch). Refuses an `out` that
// already holds model files unless `overwrite`.
ExportResult export_hf(const std::filesystem::path& checkpoint, const std::filesystem::path& out, bool overwrite);

}  // namespace gputrain
