#include "checkpoint/hf_export.h"

#include <nlohmann/json.hpp>

#include <map>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/hf_folder.h"
#include "checkpoint/model_files.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/training_checkpoint.h"
#include "config/recipe.h"
#include "data/token_dataset.h"
#include "data/token_shard.h"
#include "model/architecture.h"
#include "model/hf_mapping.h"
#include "model/lora.h"
#include "util/atomic_file.h"
#include "util/dir_lock.h"
#include "util/error.h"
#include "util/tensor_text.h"
#include "util/text_file.h"

namespace gputrain {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

// The files of a Hugging Face tokenizer, as save_pretrained writes them.
const std::vector<std::string>& tokenizer_file_names() {
  static const std::vector<std::string> names = {
      "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",   "vocab.json",
      "merges.txt",     "added_tokens.json",     "chat_template.jinja",     "chat_template.json"};
  return names;
}

// What an export reads from a checkpoint, checked: its recipe and its weights.
struct ExportSource {
  Settings settings;
  std::vector<NamedTensor> weights;  // hf: plain (tp shards joined, LoRA merged); peft: the adapters
  int64_t step = 0;
};

ExportSource read_export_source(const fs::path& checkpoint, const ExportOptions& o) {
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
  if (o.format == ExportFormat::kPeft) {
    if (!lora)
      throw usage_error("checkpoint '" + checkpoint.string() + "' has no LoRA adapters (model.lora.rank is 0)" +
                        "\n    fix: use --format hf");
    if (o.merge_lora) throw usage_error("--merge-lora goes with --format hf\n    fix: leave out --merge-lora");
    for (auto& w : read_checkpoint_model(checkpoint))
      if (is_lora_parameter(w.name)) src.weights.push_back(std::move(w));
  } else {
    if (lora && !o.merge_lora)
      throw usage_error("checkpoint '" + checkpoint.string() + "' holds LoRA adapters (model.lora.rank " +
                        std::to_string(s.model.lora.rank) + "); the Hugging Face model format holds plain weights" +
                        "\n    fix: pass --merge-lora to write W + (alpha / rank) B A for every adapted layer, or "
                        "--format peft for the adapters alone");
    if (!lora && o.merge_lora)
      throw usage_error("checkpoint '" + checkpoint.string() + "' has no LoRA adapters (model.lora.rank is 0)" +
                        "\n    fix: leave out --merge-lora");
    src.weights = checkpoint_plain_weights(checkpoint, s);
  }
  src.step = parse_json_file(checkpoint / "trainer.json", "checkpoint file", "export another checkpoint")
                 .value("step", int64_t{0});
  return src;
}

// The Hugging Face model folder the run started from, if model.init_from names one.
std::optional<fs::path> base_model_folder(const ModelSettings& m) {
  if (m.init_from.empty()) return std::nullopt;
  const fs::path p = m.init_from;
  std::error_code ec;
  if (fs::is_directory(p, ec) && fs::exists(p / "config.json")) return p;
  return std::nullopt;
}

torch::ScalarType export_dtype(const ExportOptions& o, const std::vector<NamedTensor>& weights, std::string& name) {
  const std::map<std::string, torch::ScalarType>& types = float_dtypes_by_name();
  if (o.dtype == "auto") {
    const torch::ScalarType t = weights.empty() ? torch::kFloat : weights.front().tensor.scalar_type();
    for (const auto& [n, type] : types)
      if (type == t) name = n;
    if (name.empty()) name = "float32";
    return types.at(name);
  }
  auto it = types.find(o.dtype);
  if (it == types.end()) throw usage_error("--dtype '" + o.dtype + "' is not one of auto, float32, bfloat16, float16");
  name = o.dtype;
  return it->second;
}

// The tokenizer's bos/eos ids for config.json and generation_config.json: the base model's
// config.json's, else the data's sidecar's, else GPT-2's end-of-text where the vocabulary has it.
std::pair<json, json> special_ids(const ModelSettings& m, const json& base_config,
                                  const std::optional<ShardInfo>& info) {
  json bos = gpt2_eot_id(m), eos = gpt2_eot_id(m);
  if (info && !info->tokenizer.empty() && info->tokenizer != "gpt2") {
    bos = info->bos_token >= 0 ? json(info->bos_token) : json(nullptr);
    eos = info->eos_token >= 0 ? json(info->eos_token) : json(nullptr);
  }
  if (base_config.contains("bos_token_id")) bos = base_config["bos_token_id"];
  if (base_config.contains("eos_token_id")) eos = base_config["eos_token_id"];
  return {bos, eos};
}

// Copies the tokenizer files of the base model, or of the data's tokenizer; returns where from.
std::string copy_tokenizer_files(const fs::path& out, const std::optional<fs::path>& base,
                                 const std::optional<ShardInfo>& info, std::vector<std::string>& files) {
  auto copy_from = [&](const fs::path& dir) {
    bool any = false;
    for (const std::string& name : tokenizer_file_names())
      if (fs::exists(dir / name)) {
        fs::copy_file(dir / name, out / name, fs::copy_options::overwrite_existing);
        files.push_back(name);
        any = true;
      }
    return any;
  };
  if (base && copy_from(*base)) return base->string();
  if (!info || info->tokenizer.empty() || info->tokenizer == "bytes" || info->tokenizer == "gpt2") return "";
  const fs::path t = info->tokenizer;
  std::error_code ec;
  if (fs::is_directory(t, ec)) return copy_from(t) ? t.string() : "";
  if (!fs::exists(t)) return "";
  // A single tokenizer file: under the name transformers looks for, with its folder's config beside.
  const std::string name = info->tokenizer_kind == "sentencepiece" ? "tokenizer.model" : "tokenizer.json";
  fs::copy_file(t, out / name, fs::copy_options::overwrite_existing);
  files.push_back(name);
  for (const char* extra : {"tokenizer_config.json", "special_tokens_map.json"})
    if (fs::exists(t.parent_path() / extra)) {
      fs::copy_file(t.parent_path() / extra, out / extra, fs::copy_options::overwrite_existing);
      files.push_back(extra);
    }
  return t.string();
}

void write_hf_folder(const fs::path& out, const ExportSource& src, const ExportOptions& o, ExportResult& r) {
  const ModelSettings& m = src.settings.model;
  const Architecture& arch = architecture(m);
  const torch::ScalarType dtype = export_dtype(o, src.weights, r.dtype);
  const std::vector<NamedTensor> hf = to_hf_tensors(src.weights, m, dtype);
  r.files = write_hf_weights(out, hf, o.max_shard_bytes);
  r.tensors = static_cast<int64_t>(hf.size());

  // config.json: ours over the base model's, so that what we do not model (token ids, names) survives.
  const std::optional<fs::path> base = base_model_folder(m);
  json config = json::object();
  if (base) {
    const nlohmann::json theirs = read_hf_config(*base);
    if (theirs.value("model_type", std::string()) == arch.hf.model_type) config = json::parse(theirs.dump());
  }
  const std::optional<ShardInfo> info = first_sidecar(src.settings.data.train);
  const auto [bos, eos] = special_ids(m, config, info);
  const json ours = arch.hf.config(m);
  for (const auto& [key, value] : ours.items()) config[key] = value;
  if (!m.rope_scaling.enabled() && config.contains("rope_scaling")) config["rope_scaling"] = nullptr;
  config["bos_token_id"] = bos;
  config["eos_token_id"] = eos;
  config["torch_dtype"] = r.dtype;  // transformers 4.x
  config["dtype"] = r.dtype;        // transformers 5
  write_file_atomic((out / "config.json").string(), config.dump(2) + "\n");
  r.files.push_back("config.json");

  if (base && fs::exists(*base / "generation_config.json")) {
    fs::copy_file(*base / "generation_config.json", out / "generation_config.json",
                  fs::copy_options::overwrite_existing);
  } else {
    json generation = {{"bos_token_id", bos}, {"eos_token_id", eos}};
    write_file_atomic((out / "generation_config.json").string(), generation.dump(2) + "\n");
  }
  r.files.push_back("generation_config.json");
  r.tokenizer_from = copy_tokenizer_files(out, base, info, r.files);
}

void write_peft_folder(const fs::path& out, const ExportSource& src, const ExportOptions& o, ExportResult& r) {
  const ModelSettings& m = src.settings.model;
  const Architecture& arch = architecture(m);
  const torch::ScalarType dtype = export_dtype(o, src.weights, r.dtype);
  std::map<std::string, torch::Tensor> adapters;
  for (const auto& [name, t] : src.weights) adapters[name] = t.detach().to(torch::kCPU, torch::kFloat);
  // Each Hugging Face projection whose rows are (part of) an adapted Linear of ours.
  std::vector<NamedTensor> tensors;
  json targets = json::array();
  for (const HfTensor& e : arch.hf.tensors(m)) {
    if (e.ours.empty() || !e.ours.ends_with(".weight")) continue;
    const std::string linear = e.ours.substr(0, e.ours.size() - 7);
    auto a = adapters.find(linear + ".lora_A"), b = adapters.find(linear + ".lora_B");
    if (a == adapters.end() || b == adapters.end()) continue;
    const std::string module = e.hf.substr(0, e.hf.size() - 7);  // "...q_proj"
    const torch::Tensor rows = e.rows > 0 ? b->second.narrow(0, e.row_offset, e.rows) : b->second;
    tensors.push_back({"base_model.model." + module + ".lora_A.weight", a->second.to(dtype).contiguous()});
    tensors.push_back({"base_model.model." + module + ".lora_B.weight", rows.to(dtype).contiguous()});
    targets.push_back(module);
  }
  if (tensors.empty())
    throw data_error("the checkpoint's LoRA adapters match no layer of " + std::string(arch.hf.class_name));
  write_safetensors((out / "adapter_model.safetensors").string(), tensors, {{"format", "pt"}});
  const bool conv1d = m.arch == ModelArch::kGpt;  // GPT-2's Conv1D stores [in, out]
  json config = {{"peft_type", "LORA"},
                 {"task_type", "CAUSAL_LM"},
                 {"base_model_name_or_path", m.init_from},
                 {"r", m.lora.rank},
                 {"lora_alpha", m.lora.alpha},
                 {"lora_dropout", m.lora.dropout},
                 {"target_modules", targets},
                 {"bias", "none"},
                 {"fan_in_fan_out", conv1d},
                 {"use_rslora", false},
                 {"use_dora", false},
                 {"init_lora_weights", true},
                 {"inference_mode", true},
                 {"modules_to_save", nullptr}};
  write_file_atomic((out / "adapter_config.json").string(), config.dump(2) + "\n");
  r.files = {"adapter_model.safetensors", "adapter_config.json"};
  r.tensors = static_cast<int64_t>(tensors.size());
}

ExportResult export_locked(const fs::path& where, const fs::path& out, const ExportOptions& o) {
  // One writer at a time (util/dir_lock.h): a live run's folder, or another export's, is refused.
  const DirectoryLock lock = DirectoryLock::acquire(out, "choose another --out");
  if (!o.overwrite)
    for (const char* name : {"model.safetensors", "model.safetensors.index.json", "config.json",
                             "adapter_model.safetensors", "adapter_config.json"})
      if (fs::exists(out / name))
        throw usage_error("'" + out.string() + "' already holds model files (" + name + ")" +
                          "\n    fix: choose another --out, or pass --overwrite to replace them");
  ExportResult r;
  ExportSource src;
  for (int attempt = 0;; ++attempt) {
    r.checkpoint = find_checkpoint(where);
    try {
      src = read_export_source(r.checkpoint, o);
      break;
    } catch (const Error&) {
      // A live run may remove it while it is read (checkpoint.keep_last): take the newest again.
      if (attempt < 3 && !fs::exists(r.checkpoint)) continue;
      throw;
    }
  }
  r.step = src.step;
  r.architecture = architecture(src.settings.model).hf.class_name;
  if (o.format == ExportFormat::kPeft) write_peft_folder(out, src, o, r);
  else write_hf_folder(out, src, o, r);
  return r;
}

}  // namespace

ExportResult export_model(const fs::path& where, const fs::path& out, const ExportOptions& options) {
  std::error_code ec;
  const bool out_existed = fs::exists(out, ec);
  try {
    return export_locked(where, out, options);
  } catch (...) {
    if (!out_existed) fs::remove_all(out, ec);  // a failed export leaves no folder of its making
    throw;
  }
}

ExportResult export_hf(const fs::path& where, const fs::path& out, bool overwrite, bool merge_lora_adapters) {
  ExportOptions o;
  o.overwrite = overwrite;
  o.merge_lora = merge_lora_adapters;
  return export_model(where, out, o);
}

}  // namespace gputrain
