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
#include "model/hf_config_reader.h"
#include "model/hf_tensor.h"
#include "model/norm.h"
#include "util/named_tensor.h"

namespace gputrain {

enum class MlpKind {
  kGelu,   // c_proj(gelu_tanh(c_fc x)): two matrices
  kSwiGlu  // c_proj(silu(gate x) * up x), gate and up stacked in c_fc: three matrices
};
enum class PositionKind { kLearned, kRotary };  // a wpe table added to the embeddings, or q and k rotated

// Which Linear layers have biases: q/k/v (attn.c_attn), the attention's output projection
// (attn.c_proj) and the MLP's layers.
struct LinearBiases {
  bool qkv, out, mlp;
};

// Hugging Face interop (model/hf_mapping.h does the work from these tables). Our parameter names
// are GPT-2's for every architecture (model/gpt.h).
struct HfMapping {
  const char* model_type;  // config.json's "model_type"
  const char* class_name;  // what `gputrain export` writes: "GPT2LMHeadModel"
  const char* family;      // for messages: "GPT-2"
  // Every tensor of the Hugging Face model for the shapes of `m`, in its files' order.
  std::vector<HfTensor> (*tensors)(const ModelSettings& m);
  // A file's tensor name as tensors() spells it; "" = not a weight (a buffer older files hold).
  std::string (*canonical_name)(const std::string& name);
  // config.json for the shapes of `m`.
  nlohmann::ordered_json (*config)(const ModelSettings& m);
  // config.json's fields as model.* keys (model/hf_config_reader.h).
  void (*import_config)(HfConfigReader& r);
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
  // Which Linear layers have biases, from model.bias / attention_bias / mlp_bias.
  LinearBiases (*biases)(const ModelSettings& m);
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
inline LinearBiases linear_biases(const ModelSettings& m) { return architecture(m).biases(m); }

// The architecture of a Hugging Face config.json (model_type, else architectures[0]), or a
// DataError naming `file` and the architectures gputrain implements.
const Architecture& architecture_of_hf_config(const nlohmann::json& config, const std::string& file);
// model.arch from config.json's architecture, then that architecture's import_config, through `r`
// (importing for a recipe, or checking settings already made: model/hf_config_reader.h).
void import_hf_config(HfConfigReader& r);

// What loading a recipe needs of the architectures (config/recipe.h).
const ModelRules& architecture_rules();

}  // namespace gputrain
