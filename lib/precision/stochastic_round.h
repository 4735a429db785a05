// fp32 -> bf16 with stochastic rounding: rounds up with probability equal to
// the dropped fraction, so the expected result equals the fp32 value. Small
// optimizer updates that round-to-nearest would lose every time survive on
// average; bf16-pure training writes its fp32 updates back this way.
#pragma once
#include <torch/types.h>

namespace gputrain {

// `src` is float32; writes the rounded values into bf16 `dst` (same shape).
void stochastic_round_to_bf16(const torch::Tensor& src, const torch::Tensor& dst);

}  // namespace gputrain
