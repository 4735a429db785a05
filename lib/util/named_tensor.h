// A tensor with the name it carries in checkpoints and files (a module path such as
// "transformer.h.0.attn.c_attn.weight", or "<parameter>.<slot>" for optimizer state).
#pragma once
#include <torch/nn/module.h>
#include <torch/types.h>

#include <string>
#include <vector>

namespace gputrain {

struct NamedTensor {
  std::string name;
  torch::Tensor tensor;
};

// A module's parameters under their module paths ("transformer.h.0.attn.c_attn.weight"), in
// registration order.
std::vector<NamedTensor> module_weights(const torch::nn::Module& m);

}  // namespace gputrain
