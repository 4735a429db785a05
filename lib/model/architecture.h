// An architecture, whole: what its blocks are made of (norm, MLP, positions), the defaults and
// checks it gives the recipe, its MLP width rule, and how its weights and config.json map to a
// Hugging Face model's. Each lives in one file, model/arch_<name>.cpp, listed in the table of
// model/architecture.cpp; the rest of the tree asks these properties, never which architecture
// it is (docs/contributing.md, "Adding an architecture").
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/model_rules.h"
#include "config/settings.h"
#include "model/norm.h"
#include "util/named_tensor.h"

namespace gputrain {

enum class MlpKind {
  kGelu,   // c_proj(gelu_tanh(c_fc x)): two matrices
  kSwiGlu  // c_proj(silu(gate x) * up x), gate and up stacked in c_fc: three matrices
};
enum class PositionKind { kLearned, kRotary };  // a wpe table added to the embeddings, or q and k rotated

// Hugging Face interop. Our parameter names are GPT-2's for every architecture (model/gpt.h).
struct HfMapping {
  const char* model_type;  // config.json's "model_type"
  const char* class_name;  // what `gputrain export` writes: "GPT2LMHeadModel"
  const char* family;      // for messages: "GPT-2"
  // Our weights (module_weights of a Gpt) as the Hugging Face model's, float32, padding rows cut.
  std::vector<NamedTensor> (*to_hf)(const std::vector<NamedTensor>& ours, const ModelSettings& m);
  // config.json with the shapes of `m`.
  nlohmann::ordered_json (*config)(const ModelSettings& m);
  // Hugging Face weights `hf` (from `source`, for messages) as ours for `m`; `current` (the model's
  // own weights) fills rows the file lacks. A config.json or a shape that disagrees with `m` is a
  // DataError naming the recipe key to change.
  std::vector<NamedTensor> (*from_hf)(const std::vector<NamedTensor>& hf, const nlohmann::json& config,
                                      const std::vector<NamedTensor>& current, const ModelSettings& m,
                                      const std::string& source);
};

struct Architecture {
  ModelArch id;
  const char* name;          // model.arch's value
  const char* display_name;  // in log lines
  NormKind norm;
  MlpKind mlp;
  PositionKind positions;
  // Defaults of model.bias and model.tie_embeddings where the recipe does not set them.
  bool default_bias;
  bool default_tie_embeddings;
  // The MLP's hidden size from model.mlp_ratio (model.mlp_width 0).
  int64_t (*mlp_width_from_ratio)(const ModelSettings& m);
  // Its own checks of the model.* keys (the shared ones are in config/validate.cpp).
  void (*check)(const ModelSettings& m, std::vector<KeyProblem>& problems);
  HfMapping hf;

  int64_t mlp_matrices() const { return mlp == MlpKind::kSwiGlu ? 3 : 2; }
  // Rows of the MLP's c_fc for a hidden size: SwiGLU stacks gate and up.
  int64_t mlp_fc_rows(int64_t hidden) const { return mlp == MlpKind::kSwiGlu ? 2 * hidden : hidden; }
  bool norm_has_bias() const { return norm == NormKind::kLayerNorm; }
};

// Every architecture, in model.arch's order.
const std::vector<const Architecture*>& architectures();
const Architecture& architecture(ModelArch arch);
inline const Architecture& architecture(const ModelSettings& m) { return architecture(m.arch); }
// The architecture whose Hugging Face model_type this is, or null.
const Architecture* architecture_of_hf_model_type(const std::string& model_type);

// The MLP's hidden size: model.mlp_width, or the architecture's rule from model.mlp_ratio.
int64_t mlp_hidden(const ModelSettings& m);

// What loading a recipe needs of the architectures (config/recipe.h).
const ModelRules& architecture_rules();

}  // namespace gputrain
