#include "checkpoint/model_files.h"

#include <fmt/format.h>

#include <set>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/module_weights.h"
#include "checkpoint/training_checkpoint.h"
#include "config/recipe.h"
#include "model/architecture.h"
#include "model/gpt.h"
#include "model/lora.h"
#include "util/atomic_file.h"
#include "util/dir_lock.h"
#include "util/error.h"
#include "util/text_file.h"

namespace gputrain {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

json read_json(const fs::path& p) {
  try {
    return json::parse(read_text_file(p));
  } catch (const json::exception& e) {
    throw data_error("'" + p.string() + "' is not valid JSON: " + e.what());
  }
}

// All tensors of a Hugging Face model directory: model.safetensors, or the shards of its index.
std::vector<NamedTensor> read_hf_weights(const fs::path& dir) {
  if (fs::exists(dir / "model.safetensors")) return read_safetensors((dir / "model.safetensors").string()).tensors;
  const fs::path index = dir / "model.safetensors.index.json";
  if (!fs::exists(index))
    throw data_error("'" + dir.string() + "' has neither model.safetensors nor model.safetensors.index.json" +
                     "\n    fix: save the model with save_pretrained(dir) (safetensors is its default), or name the "
                     ".safetensors file");
  std::set<std::string> shards;
  try {
    for (const auto& [_, file] : read_json(index).at("weight_map").items()) shards.insert(file.get<std::string>());
  } catch (const json::exception& e) {
    throw data_error("'" + index.string() + "' has no valid weight_map: " + e.what());
  }
  std::vector<NamedTensor> all;
  for (const auto& shard : shards)
    for (auto& t : read_safetensors((dir / shard).string()).tensors) all.push_back(std::move(t));
  return all;
}

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
  std::vector<NamedTensor> hf;
  json config = json::object();
  if (fs::is_directory(p)) {
    hf = read_hf_weights(p);
    if (fs::exists(p / "config.json")) config = read_json(p / "config.json");
  } else {
    SafetensorsFile f = read_safetensors(path);
    if (written_by_gputrain(f)) {
      load_module_weights(model, f.tensors, "model.init_from '" + path + "'", fix, base);
      return "gputrain weights from " + path;
    }
    hf = std::move(f.tensors);
    if (fs::exists(p.parent_path() / "config.json")) config = read_json(p.parent_path() / "config.json");
  }
  const std::string source = "model.init_from '" + path + "'";
  const HfMapping& mapping = architecture(m).hf;
  std::vector<NamedTensor> current;
  for (auto& w : module_weights(model))
    if (base(w.name)) current.push_back(std::move(w));
  load_module_weights(model, mapping.from_hf(hf, config, current, m, source), source, fix, base);
  return std::string("Hugging Face ") + mapping.family + " weights from " + path;
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

std::vector<NamedTensor> checkpoint_plain_weights(const fs::path& checkpoint, const Settings& saved) {
  std::vector<NamedTensor> weights = read_checkpoint_model(checkpoint);  // tp shards joined
  const std::string base = read_json(checkpoint / "trainer.json").value("lora_base", std::string());
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

namespace {

// What an export reads from a checkpoint, checked: its recipe and its plain weights (tp shards joined, LoRA merged).
struct ExportSource {
  Settings settings;
  std::vector<NamedTensor> weights;
  int64_t step = 0;
};

ExportSource read_export_source(const fs::path& checkpoint, bool merge_lora_adapters) {
  if (auto problem = checkpoint_problem(checkpoint))
    throw data_error("checkpoint '" + checkpoint.string() + "' is not usable: " + *problem +
                     "\n    fix: export another checkpoint");
  ExportSource src;
  const fs::path recipe = checkpoint / "recipe.yaml";
  src.settings = settings_from_saved_recipe(read_text_file(recipe), recipe.string(), architecture_rules());
  const Settings& s = src.settings;
  if (s.model.moe.enabled())
    throw data_error("checkpoint '" + checkpoint.string() + "' is a mixture-of-experts model (model.moe), which " +
                     architecture(s.model).hf.class_name +
                     " cannot hold (and Mixtral routes differently: it renormalizes the top-k probabilities)" +
                     "\n    fix: keep it as a gputrain checkpoint (model.init_from reads it)");
  const bool lora = s.model.lora.rank > 0;
  if (lora && !merge_lora_adapters)
    throw usage_error("checkpoint '" + checkpoint.string() + "' holds LoRA adapters (model.lora.rank " +
                      std::to_string(s.model.lora.rank) + "); the Hugging Face formats hold plain weights" +
                      "\n    fix: pass --merge-lora to write W + (alpha / rank) B A for every adapted layer");
  if (!lora && merge_lora_adapters)
    throw usage_error("checkpoint '" + checkpoint.string() + "' has no LoRA adapters (model.lora.rank is 0)" +
                      "\n    fix: leave out --merge-lora");
  src.weights = checkpoint_plain_weights(checkpoint, s);
  src.step = read_json(checkpoint / "trainer.json").value("step", int64_t{0});
  return src;
}

ExportResult export_hf_locked(const fs::path& where, const fs::path& out, bool overwrite, bool merge_lora_adapters) {
  // One writer at a time (util/dir_lock.h): a live run's folder, or another export's, is refused.
  const DirectoryLock lock = DirectoryLock::acquire(out, "choose another --out");
  if (!overwrite && (fs::exists(out / "model.safetensors") || fs::exists(out / "config.json")))
    throw usage_error("'" + out.string() + "' already holds model files" +
                      "\n    fix: choose another --out, or pass --overwrite to replace them");
  ExportResult r;
  ExportSource src;
  for (int attempt = 0;; ++attempt) {
    r.checkpoint = find_checkpoint(where);
    try {
      src = read_export_source(r.checkpoint, merge_lora_adapters);
      break;
    } catch (const Error&) {
      // A live run may remove it while it is read (checkpoint.keep_last): take the newest again.
      if (attempt < 3 && !fs::exists(r.checkpoint)) continue;
      throw;
    }
  }
  const HfMapping& mapping = architecture(src.settings.model).hf;
  const std::vector<NamedTensor> hf = mapping.to_hf(src.weights, src.settings.model);
  write_safetensors((out / "model.safetensors").string(), hf, {{"format", "pt"}});
  write_file_atomic((out / "config.json").string(), mapping.config(src.settings.model).dump(2) + "\n");
  r.step = src.step;
  r.tensors = static_cast<int64_t>(hf.size());
  r.architecture = mapping.class_name;
  return r;
}

}  // namespace

ExportResult export_hf(const fs::path& where, const fs::path& out, bool overwrite, bool merge_lora_adapters) {
  std::error_code ec;
  const bool out_existed = fs::exists(out, ec);
  try {
    return export_hf_locked(where, out, overwrite, merge_lora_adapters);
  } catch (...) {
    if (!out_existed) fs::remove(out, ec);  // a failed export leaves no empty folder of its making
    throw;
  }
}

}  // namespace gputrain
