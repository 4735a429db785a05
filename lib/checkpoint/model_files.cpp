#include "checkpoint/model_files.h"

#include <fmt/format.h>

#include <map>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/hf_folder.h"
#include "checkpoint/module_weights.h"
#include "checkpoint/training_checkpoint.h"
#include "config/recipe.h"
#include "model/architecture.h"
#include "model/gpt.h"
#include "model/hf_mapping.h"
#include "model/lora.h"
#include "model/meta_build.h"
#include "util/atomic_file.h"
#include "util/dir_lock.h"
#include "util/error.h"
#include "util/text_file.h"

namespace gputrain {
namespace {

namespace fs = std::filesystem;

bool written_by_gputrain(const SafetensorsFile& f) {
  auto it = f.metadata.find("format");
  return it != f.metadata.end() && it->second == "gputrain";
}

}  // namespace

std::string load_initial_weights(torch::nn::Module& model, const ModelSettings& m, const std::string& path) {
  const std::string fix = "start from weights of a model with this recipe's model.* settings";
  // A LoRA model starts its base from the weights; its adapters keep their initialization.
  const auto base = [](const std::string& name) { return !is_lora_parameter(name); };
  const fs::path p(path);
  if (fs::is_directory(p) && is_training_checkpoint(p)) {
    if (auto problem = checkpoint_problem(p))
      throw data_error("model.init_from: checkpoint '" + path + "' is not usable: " + *problem +
                       "\n    fix: name a complete checkpoint");
    // A tensor-parallel checkpoint's shards are joined: the weights start a run at any parallel.tp.
    const Settings saved = settings_from_saved_recipe(read_text_file(p / "recipe.yaml"), (p / "recipe.yaml").string(),
                                                      architecture_rules());
    load_module_weights(model, checkpoint_plain_weights(p, saved), "model.init_from checkpoint '" + path + "'", fix,
                        base);
    return "weights of gputrain checkpoint " + path;
  }
  const std::string source = "model.init_from '" + path + "'";
  const Architecture& arch = architecture(m);
  const auto check_config = [&](const nlohmann::json& config, const std::string& file) {
    // The settings were made from this config.json when the recipe was loaded; a run's saved
    // recipe may meet a folder that changed since.
    ModelSettings copy = m;
    HfConfigReader r(config, file, copy, [](const std::string&) { return true; });
    import_hf_config(r);
    r.throw_if_problems(source);
  };
  std::map<std::string, torch::Tensor> targets;
  for (auto& [name, t] : module_weights(model))
    if (base(name)) targets[name] = t;
  HfWeightImport import(m, std::move(targets), source);
  const auto take = [&](const std::string& name, const torch::Tensor& t, const std::string& file) {
    import.take(name, t, file);
  };
  if (fs::is_directory(p)) {
    check_config(read_hf_config(p), (p / "config.json").string());
    for_each_hf_tensor(p, take);  // one shard at a time
  } else {
    SafetensorsFile f = read_safetensors(path);
    if (written_by_gputrain(f)) {
      load_module_weights(model, f.tensors, "model.init_from '" + path + "'", fix, base);
      return "gputrain weights from " + path;
    }
    if (fs::exists(p.parent_path() / "config.json"))
      check_config(read_hf_config(p.parent_path()), (p.parent_path() / "config.json").string());
    for (const auto& [name, t] : f.tensors) take(name, t, path);
  }
  import.finish();
  return std::string("Hugging Face ") + arch.hf.family + " weights from " + path;
}

Gpt build_initial_model(const Settings& s, torch::Device device, torch::ScalarType dtype, bool skip_init_from,
                        std::string* described) {
  torch::manual_seed(static_cast<uint64_t>(s.run.seed));
  Gpt model(s.model);  // initialized in fp32, then cast: bf16-pure starts from the same weights rounded
  model->to(device, dtype);
  if (!skip_init_from && !s.model.init_from.empty()) {
    const std::string what = load_initial_weights(*model, s.model, s.model.init_from);
    if (described) *described = what;
  }
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
    check_lora_base(module_weights(*model), base, checkpoint.string(), saved.model.init_from);
    load_module_weights(*model, weights, "checkpoint '" + checkpoint.string() + "'", "use a checkpoint of this run",
                        is_lora_parameter);
    weights = module_weights(*model);
  }
  return saved.model.lora.rank > 0 ? merge_lora(weights, saved.model.lora) : weights;
}

void check_lora_base(const std::vector<NamedTensor>& weights, const std::string& expected,
                     const std::string& checkpoint, const std::string& init_from) {
  const std::string got = lora_base_fingerprint(weights);
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
