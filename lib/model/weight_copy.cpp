#include "model/weight_copy.h"

#include <ATen/autocast_mode.h>
#include <torch/autograd.h>

namespace gputrain {
namespace {

// Forward: the copy (as a new view, so it can carry this function's grad_fn).
// Backward: the gradient, in the weight's dtype, to the weight alone.
struct CopyAsCast : torch::autograd::Function<CopyAsCast> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& weight, const at::Tensor& copy) {
    ctx->saved_data["dtype"] = static_cast<int64_t>(weight.scalar_type());
    return copy;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
    return {grads[0].to(dtype), at::Tensor()};
  }
};

}  // namespace

torch::Tensor autocast_weight(const torch::Tensor& weight, const torch::Tensor& copy) {
  if (!copy.defined()) return weight;
  const c10::DeviceType device = weight.device().type();
  if (!at::autocast::is_autocast_enabled(device) || at::autocast::get_autocast_dtype(device) != copy.scalar_type())
    return weight;
  return CopyAsCast::apply(weight, copy);
}

}  // namespace gputrain
