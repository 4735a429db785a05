// Which parameters get weight decay. Decayed: the weight matrices of Linear
// layers (attention and MLP, and an untied lm_head). Not decayed: biases,
// LayerNorm weights, and the token/position embeddings (unless
// optim.decay_embeddings), following GPT-2/nanoGPT practice that decaying
// them only hurts. A per-group lr_scale is there for later features (LoRA, MoE).
#pragma once
#include <torch/nn/module.h>

#include <map>
#include <string>
#include <vector>

#include "config/settings.h"

namespace gputrain {

struct ParamGroup {
  std::string name;  // "decay" / "no_decay"
  std::vector<std::string> names;
  std::vector<torch::Tensor> params;
  double weight_decay = 0.0;
  double lr_scale = 1.0;
  // Parameters that fuse several of the Hugging Face layout's matrices as bands of rows: each band's
  // rows, by name (model/gpt_shapes.h fused_matrix_rows), for updates that treat each matrix alone (Muon).
  std::map<std::string, std::vector<int64_t>> matrix_rows;
};

// The token and position embeddings (wte, wpe).
bool is_embedding(const std::string& parameter_name);

std::vector<ParamGroup> make_param_groups(const torch::nn::Module& model, const OptimSettings& o);
// The same, knowing the model's fused matrices (ParamGroup::matrix_rows) from its settings `m`.
std::vector<ParamGroup> make_param_groups(const torch::nn::Module& model, const OptimSettings& o,
                                          const ModelSettings& m);

}  // namespace gputrain
