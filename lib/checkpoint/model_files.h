// Model weights in and out of gputrain: model.init_from (start a run from
// Hugging Face weights or another run's checkpoint) and `gputrain export
// --format hf` (a checkpoint as a directory that transformers' from_pretrained
// loads). The Hugging Face side is model.arch's mapping (model/architecture.h).
#pragma once
#include <filesystem>
#include <string>

#include <torch/nn/module.h>

#include "checkpoint/safetensors.h"
#include "config/settings.h"
#include "model/gpt.h"

namespace gputrain {

// Replaces `model`'s weights with those at `path`: a gputrain checkpoint
// directory (weights only; the optimizer starts fresh), a directory with
// model.safetensors (or a sharded model.safetensors.index.json) and
// config.json in the layout of model.arch's Hugging Face model, or a single
// .safetensors file in that layout. A LoRA model takes
// its base weights from there (its adapters keep their initialization).
// Returns a one-line description for the log. DataError on mismatch.
std::string load_initial_weights(torch::nn::Module& model, const ModelSettings& m, const std::string& path);

// The model a run starts from: the seed's initialization (run.seed), in
// `dtype` on `device`, then model.init_from's weights unless `skip_init_from`
// (a resumed run whose checkpoint holds every weight). `described` gets the
// log line of what init_from loaded.
Gpt build_initial_model(const Settings& s, torch::Device device, torch::ScalarType dtype, bool skip_init_from = false,
                        std::string* described = nullptr);

// `where` may be a checkpoint, a directory of step_<N> checkpoints or a run's
// output directory (its checkpoints/ is used); the newest complete one is chosen.
std::filesystem::path find_checkpoint(const std::filesystem::path& where);

struct ExportResult {
  std::filesystem::path checkpoint;
  int64_t step = 0;
  int64_t tensors = 0;
  std::string architecture;  // the Hugging Face class: GPT2LMHeadModel, LlamaForCausalLM
};
// Writes <out>/model.safetensors and <out>/config.json for the Hugging Face
// model of the checkpoint's model.arch. Refuses an `out` that
// already holds model files unless `overwrite`. A LoRA checkpoint exports
// only with `merge_lora_adapters` (the adapters merged into the weights);
// a mixture-of-experts one not at all. `out` is locked while it is written
// (util/dir_lock.h: a live run's folder is refused); reading a live run is
// fine: a checkpoint it prunes while being read is replaced by its newest.
ExportResult export_hf(const std::filesystem::path& checkpoint, const std::filesystem::path& out, bool overwrite,
                       bool merge_lora_adapters = false);

// The model a checkpoint holds as plain weights (`saved` is its recipe): its
// model files (tensor-parallel shards joined); for an adapters-only LoRA
// checkpoint the frozen base rebuilt as the run built it (the seed's
// initialization, then model.init_from) and checked against the fingerprint
// the checkpoint recorded; and LoRA adapters merged into the weights they adapt.
std::vector<NamedTensor> checkpoint_plain_weights(const std::filesystem::path& checkpoint, const Settings& saved);

// DataError unless the base weights among `weights` have the LoRA fingerprint `expected`
// (checkpoint and init_from name the files in the message).
void check_lora_base(const std::vector<NamedTensor>& weights, const std::string& expected,
                     const std::string& checkpoint, const std::string& init_from);

}  // namespace gputrain
