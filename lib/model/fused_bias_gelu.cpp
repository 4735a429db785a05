#include "model/fused_bias_gelu.h"

#include <c10/util/Exception.h>

namespace gputrain {

#ifndef GPUTRAIN_WITH_CUDA  // else in fused_bias_gelu_cuda.cpp
bool fused_bias_gelu_available(const torch::Tensor&, const torch::Tensor&) { return false; }
torch::Tensor fused_bias_gelu(const torch::Tensor&, const torch::Tensor&) {
  TORCH_CHECK(false, "the fused bias + GELU needs the CUDA build");
}
#endif

}  // namespace gputrain
