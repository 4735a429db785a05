#include "model/architecture.h"

#include <filesystem>

#include "model/hf_quantization_config.h"
#include "util/error.h"
#include "util/text_file.h"

namespace gputrain {

// The architectures, one file each (model/arch_<name>.cpp), in model.arch's order. Adding one: its
// file, its line here and below, and its value in model.arch's enum (config/settings.h, config/schema.cpp).
extern const Architecture kGpt2Architecture;
extern const Architecture kLlamaArchitecture;
extern const Architecture kQwen2Architecture;
extern const Architecture kMistralArchitecture;

const std::vector<const Architecture*>& architectures() {
  static const std::vector<const Architecture*> table = {&kGpt2Architecture, &kLlamaArchitecture, &kQwen2Architecture,
                                                         &kMistralArchitecture};
  return table;
}

const Architecture& architecture(ModelArch arch) {
  for (const Architecture* a : architectures())
    if (a->id == arch) return *a;
  throw runtime_error("model.arch value " + std::to_string(static_cast<int>(arch)) + " has no architecture");
}

const Architecture* architecture_of_hf_model_type(const std::string& model_type) {
  for (const Architecture* a : architectures())
    if (model_type == a->hf.model_type) return a;
  return nullptr;
}

const Architecture& architecture_of_hf_config(const nlohmann::json& config, const std::string& file) {
  std::string type = config.value("model_type", std::string());
  std::string cls;
  if (config.contains("architectures") && config["architectures"].is_array() && !config["architectures"].empty() &&
      config["architectures"][0].is_string())
    cls = config["architectures"][0];
  for (const Architecture* a : architectures())
    if (type == a->hf.model_type || (type.empty() && cls == a->hf.class_name)) return *a;
  std::string known;
  for (const Architecture* a : architectures())
    known += (known.empty() ? "" : ", ") + std::string(a->hf.class_name) + " (model_type " + a->hf.model_type + ")";
  throw data_error("'" + file + "' is a " + (type.empty() ? std::string("model without a model_type") : type) +
                   (cls.empty() ? "" : " (" + cls + ")") + " model, which gputrain does not implement; it trains " +
                   known + "\n    fix: init from a model of one of those architectures");
}

void import_hf_config(HfConfigReader& r) {
  const Architecture& theirs = architecture_of_hf_config(r.config(), r.file());
  ModelSettings& m = r.settings();
  if (!r.set_by_recipe("model.arch")) {
    m.arch = theirs.id;
    r.filled.push_back("model.arch");
  } else if (m.arch != theirs.id) {
    r.problems.push_back(
        {"model.arch",
         std::string("is ") + architecture(m).name + ", but model.init_from's config.json ('" + r.file() + "') is a " +
             theirs.hf.class_name,
         std::string("leave model.arch out of the recipe (config.json sets it), or set model.arch: ") + theirs.name});
    return;  // the other keys mean what that architecture says
  }
  theirs.hf.import_config(r);
  import_hf_quantization(r);
}

int64_t mlp_hidden(const ModelSettings& m) {
  return m.mlp_width > 0 ? m.mlp_width : architecture(m).mlp_width_from_ratio(m);
}

namespace {

class ArchitectureRules final : public ModelRules {
 public:
  void apply_defaults(ModelSettings& m, const std::function<bool(const std::string&)>& set_by_recipe) const override {
    const Architecture& a = architecture(m);
    if (!set_by_recipe("model.bias")) m.bias = a.default_bias;
    if (!set_by_recipe("model.tie_embeddings")) m.tie_embeddings = a.default_tie_embeddings;
  }
  PretrainedImport import_pretrained(ModelSettings& m,
                                     const std::function<bool(const std::string&)>& set_by_recipe) const override {
    namespace fs = std::filesystem;
    PretrainedImport out;
    const fs::path dir = m.init_from;
    std::error_code ec;
    if (m.init_from.empty() || !fs::is_directory(dir, ec)) return out;  // none, a file, or missing (validation)
    if (!fs::exists(dir / "config.json")) {
      // A gputrain checkpoint or run folder has its own recipe; anything else needs a config.json.
      if (!fs::exists(dir / "recipe.yaml") && !fs::exists(dir / "trainer.json") && !fs::exists(dir / "checkpoints"))
        out.problems.push_back({"model.init_from",
                                "'" + m.init_from + "' has no config.json, so it is neither a Hugging Face model " +
                                    "folder nor a gputrain checkpoint",
                                "name a folder written by save_pretrained (config.json and safetensors), a gputrain "
                                "checkpoint, or a .safetensors file with the model.* keys in the recipe"});
      return out;
    }
    out.config_file = (dir / "config.json").string();
    try {
      const nlohmann::json config =
          parse_json_file(out.config_file, "model config", "use the config.json save_pretrained wrote");
      HfConfigReader r(config, out.config_file, m, set_by_recipe);
      import_hf_config(r);
      out.filled = std::move(r.filled);
      out.problems = std::move(r.problems);
    } catch (const nlohmann::json::exception& e) {  // a field of a type its reader did not expect
      out.problems.push_back({"model.init_from", "'" + out.config_file + "' cannot be read: " + e.what(),
                              "use the config.json save_pretrained wrote"});
    } catch (const Error& e) {
      const std::string text = e.what(), marker = "\n    fix: ";
      const size_t at = text.find(marker);
      out.problems.push_back(
          {"model.init_from", text.substr(0, at),
           at == std::string::npos ? "init from a supported model" : text.substr(at + marker.size())});
    }
    return out;
  }
  std::vector<KeyProblem> check(const ModelSettings& m) const override {
    std::vector<KeyProblem> problems;
    architecture(m).check(m, problems);
    return problems;
  }
  int64_t mlp_hidden(const ModelSettings& m) const override { return gputrain::mlp_hidden(m); }
};

}  // namespace

const ModelRules& architecture_rules() {
  static const ArchitectureRules rules;
  return rules;
}

}  // namespace gputrain
