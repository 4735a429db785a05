// The GPT's parameters (names and shapes, in registration order) computed
// from the settings alone: the memory plan and optimizer-state estimates use
// it without building a model. A test checks it against the real module.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "config/settings.h"

namespace gputrain {

struct ParamShape {
  std::string name;
  std::vector<int64_t> sizes;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    return n;
  }
};

std::vector<ParamShape> gpt_parameter_shapes(const ModelSettings& m);

}  // namespace gputrain
