#include "checkpoint/model_files.h"

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/module_weights.h"
#include "checkpoint/stored_weights.h"
#include "checkpoint/training_checkpoint.h"
#include "model/gpt.h"
#include "model/lora.h"
#include "model/meta_build.h"
#include "model/quantized_weight.h"
#include "util/atomic_file.h"
#include "util/dir_lock.h"
#include "util/error.h"
#include "util/text_file.h"

namespace gputrain {

namespace fs = std::filesystem;

namespace {

std::vector<NamedTensor> base_weights(const torch::nn::Module& model) {
  std::vector<NamedTensor> base;
  for (auto& w : module_weights(model))
    if (!is_lora_parameter(w.name)) base.push_back(std::move(w));
  return base;
}

}  // namespace

std::string load_initial_weights(torch::nn::Module& model, const ModelSettings& m, const std::string& path) {
  // A LoRA model starts its base from the weights; its adapters keep their initialization.
  const std::vector<NamedTensor> base = base_weights(model);
  const auto files = StoredWeights::init_from(path, m, base);
  files->read_whole(base);
  return files->description();
}

StoredBands stored_4bit_bands(const Gpt& model, const ModelSettings& m) {
  std::error_code ec;
  if (!m.quantize.enabled() || m.init_from.empty() || !fs::exists(fs::path(m.init_from) / "config.json", ec)) return {};
  std::shared_ptr<const StoredWeights> files = StoredWeights::init_from(m.init_from, m, base_weights(*model));
  return
      [files](const std::string& name, int64_t first, int64_t count) { return files->stored_4bit(name, first, count); };
}

Gpt build_initial_model(const Settings& s, torch::Device device, torch::ScalarType dtype) {
  torch::manual_seed(static_cast<uint64_t>(s.run.seed));
  Gpt model(s.model);  // initialized in fp32, then cast: bf16-pure starts from the same weights rounded
  model->to(device, dtype);
  if (!s.model.init_from.empty()) load_initial_weights(*model, s.model, s.model.init_from);
  return model;
}

Gpt build_model_on_meta(const Settings& s, torch::ScalarType dtype) {
  torch::manual_seed(static_cast<uint64_t>(s.run.seed));  // the model's init_seed
  MetaBuild meta;
  Gpt model(s.model);
  model->to(dtype);
  return model;
}

std::vector<NamedTensor> checkpoint_plain_weights(const fs::path& checkpoint, const Settings& saved) {
  std::vector<NamedTensor> weights = read_checkpoint_model(checkpoint);  // tp shards joined
  const std::string base = parse_json_file(checkpoint / "trainer.json", "checkpoint file", "use another checkpoint")
                               .value("lora_base", std::string());
  if (!base.empty()) {
    // Adapters only: the base is rebuilt as the run built it, on the CPU.
    const torch::ScalarType dtype = saved.precision.mode == PrecisionMode::kBf16Pure ? torch::kBFloat16 : torch::kFloat;
    Gpt model = build_initial_model(saved, torch::kCPU, dtype);
    check_lora_base(with_base_quantization(lora_base_fingerprint(module_weights(*model)), saved.model.quantize), base,
                    checkpoint.string(), saved.model.init_from);
    if (saved.model.quantize.enabled())  // the base the adapters trained on
      round_base_through_4bit(*model, stored_4bit_bands(model, saved.model));
    load_module_weights(*model, weights, "checkpoint '" + checkpoint.string() + "'", "use a checkpoint of this run",
                        is_lora_parameter);
    weights = module_weights(*model);
  }
  return saved.model.lora.rank > 0 ? merge_lora(weights, saved.model.lora) : weights;
}

void check_lora_base(const std::string& got, const std::string& expected, const std::string& checkpoint,
                     const std::string& init_from) {
  if (got == expected) return;
  throw data_error(
      "checkpoint '" + checkpoint + "' holds LoRA adapters trained on another base model (fingerprint " + expected +
      "; the recipe's base, " +
      (init_from.empty() ? std::string("the seed's random initialization") : "model.init_from '" + init_from + "'") +
      ", has " + got + ")\n    fix: set model.init_from (and run.seed) to the base the adapters were trained on");
}

fs::path find_checkpoint(const fs::path& where) {
  if (is_training_checkpoint(where)) return where;
  for (const fs::path& root : {where, where / "checkpoints"}) {
    const CheckpointListing l = list_checkpoints(root);
    if (!l.complete.empty()) return l.complete.back();
  }
  throw data_error(
      "'" + where.string() + "' holds no complete gputrain checkpoint" +
      "\n    fix: name a step_<N> checkpoint directory, the directory holding them, or a run's output directory");
}

}  // namespace gputrain
