// A tensor with the name it carries in checkpoints and files (a module path such as
// "transformer.h.0.attn.c_attn.weight", or "<parameter>.<slot>" for optimizer state).
#pragma once
#include <torch/types.h>

#include <string>

namespace gputrain {

struct NamedTensor {
  std::string name;
  torch::Tensor tensor;
};

}  // namespace gputrain
