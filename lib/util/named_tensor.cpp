#include "util/named_tensor.h"

namespace gputrain {

std::vector<NamedTensor> module_weights(const torch::nn::Module& m) {
  std::vector<NamedTensor> out;
  for (const auto& item : m.named_parameters(/*recurse=*/true)) out.push_back({item.key(), item.value()});
  return out;
}

}  // namespace gputrain
