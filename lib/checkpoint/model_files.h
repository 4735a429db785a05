// Model weights into gputrain: model.init_from (start a run from Hugging Face
// weights or another run's checkpoint), and a checkpoint's weights as plain
// ones (what `gputrain export`, checkpoint/hf_export.h, writes). The Hugging
// Face side is model.arch's mapping (model/architecture.h, model/hf_mapping.h).
#pragma once
#include <filesystem>
#include <string>

#include <torch/nn/module.h>

#include "checkpoint/safetensors.h"
#include "config/settings.h"
#include "model/gpt.h"
#include "model/quantized_weight.h"

namespace gputrain {

// Replaces `model`'s weights with those at `path`: a gputrain checkpoint
// directory (weights only; the optimizer starts fresh), a Hugging Face model
// folder (config.json and model.safetensors or the shards of its index, read
// one shard at a time, any stored dtype), or a single .safetensors file in
// model.arch's Hugging Face layout. A LoRA model takes
// its base weights from there (its adapters keep their initialization).
// Returns a one-line description for the log. DataError on mismatch.
std::string load_initial_weights(torch::nn::Module& model, const ModelSettings& m, const std::string& path);

// The model a run starts from, whole (inference, export): the seed's initialization (run.seed), in
// `dtype` on `device`, then model.init_from's weights.
Gpt build_initial_model(const Settings& s, torch::Device device, torch::ScalarType dtype);

// The bands of model.init_from that a bitsandbytes 4-bit Hugging Face folder keeps in 4 bits, as
// stored (checkpoint/hf_4bit_tensors.h): quantize_whole_model and round_base_through_4bit take them
// for `model` (as build_initial_model built it) rather than quantizing their values again. Empty for
// any other source, or without model.quantize.
StoredBands stored_4bit_bands(const Gpt& model, const ModelSettings& m);

// The same model on the meta device (shapes only, in `dtype`): parallelize gives each rank's part
// storage and the values build_initial_model's would have there (parallel/initial_parts.h).
Gpt build_model_on_meta(const Settings& s, torch::ScalarType dtype);

// `where` may be a checkpoint, a directory of step_<N> checkpoints or a run's
// output directory (its checkpoints/ is used); the newest complete one is chosen.
std::filesystem::path find_checkpoint(const std::filesystem::path& where);

// The model a checkpoint holds as plain weights (`saved` is its recipe): its
// model files (tensor-parallel shards joined); for an adapters-only LoRA
// checkpoint the frozen base rebuilt as the run built it (the seed's
// initialization, then model.init_from) and checked against the fingerprint
// the checkpoint recorded; and LoRA adapters merged into the weights they adapt.
std::vector<NamedTensor> checkpoint_plain_weights(const std::filesystem::path& checkpoint, const Settings& saved);

// DataError unless the recipe's LoRA base has the fingerprint `expected` (`got`: its fingerprint, model/lora.h;
// checkpoint and init_from name the files in the message).
void check_lora_base(const std::string& got, const std::string& expected, const std::string& checkpoint,
                     const std::string& init_from);

}  // namespace gputrain
