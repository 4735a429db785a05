#include "model/architecture.h"

#include "util/error.h"

namespace gputrain {

// The architectures, one file each (model/arch_<name>.cpp), in model.arch's order. Adding one: its
// file, its line here and below, and its value in model.arch's enum (config/settings.h, config/schema.cpp).
extern const Architecture kGpt2Architecture;
extern const Architecture kLlamaArchitecture;

const std::vector<const Architecture*>& architectures() {
  static const std::vector<const Architecture*> table = {&kGpt2Architecture, &kLlamaArchitecture};
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
