// Tensor::set_data across device kinds: a parameter built on the meta device (shapes only) takes
// real storage in place, so that every handle on it (the module's member, autograd's leaf) sees it.
#pragma once
#include <torch/types.h>

namespace gputrain {

// `t` takes `data`'s storage, shape and device; its autograd identity (requires_grad, name) stays.
// set_data refuses a meta tensor (an "incompatible tensor type"): that case copies the metadata as
// set_data itself does once its check passes.
void replace_data(const torch::Tensor& t, const torch::Tensor& data);

}  // namespace gputrain
