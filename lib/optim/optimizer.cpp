#include "optim/optimizer.h"

#include <ATen/ATen.h>

#include <set>
#include <stdexcept>
#include <sstream>

#include "precision/stochastic_round.h"
#include "util/error.h"

namespace gputrain {

Optimizer::Optimizer(std::vector<ParamGroup> groups) : groups_(std::move(groups)) {
  for (const auto& g : groups_)
    if (g.names.size() != g.params.size())
      throw std::invalid_argument("optimizer: parameter group '" + g.name + "' has " + std::to_string(g.params.size()) +
                                  " parameters but " + std::to_string(g.names.size()) + " names");
}

bool Optimizer::updates(const torch::Tensor& param) const {
  for (const auto& g : groups_)
    for (const auto& p : g.params)
      if (p.unsafeGetTensorImpl() == param.unsafeGetTensorImpl()) return true;
  return false;
}

void Optimizer::set_bf16_copy(const torch::Tensor& param, torch::Tensor copy) {
  if (!writes_bf16_copies() || !updates(param) || param.scalar_type() != at::kFloat ||
      copy.scalar_type() != at::kBFloat16 || !copy.sizes().equals(param.sizes()) || !copy.is_contiguous() ||
      copy.device() != param.device())
    throw std::invalid_argument("optimizer: a bf16 copy needs an optimizer that writes them, an fp32 parameter it "
                                "updates, and a contiguous bf16 tensor of that shape on its device");
  bf16_copies_[param.unsafeGetTensorImpl()] = std::move(copy);
}

torch::Tensor Optimizer::bf16_copy_of(const torch::Tensor& param) const {
  auto it = bf16_copies_.find(param.unsafeGetTensorImpl());
  return it == bf16_copies_.end() ? torch::Tensor() : it->second;
}

void Optimizer::zero_grad() {
  for (auto& g : groups_)
    for (auto& p : g.params) p.mutable_grad() = at::Tensor();
}

int64_t Optimizer::state_bytes() const {
  int64_t n = 0;
  for (const auto& e : state_) n += static_cast<int64_t>(e.tensor.nbytes());
  return n;
}

torch::Tensor Optimizer::add_state(const std::string& param_name, const std::string& slot, torch::Tensor t) {
  state_.push_back({param_name + "." + slot, t});
  return t;
}

torch::Tensor Optimizer::add_step_counter(const std::string& param_name) {
  return add_state(param_name, "step", at::zeros({}, at::TensorOptions().dtype(at::kLong)));
}

static std::string shape_str(const at::Tensor& t) {
  std::ostringstream s;
  s << t.sizes() << " " << t.scalar_type();
  return s.str();
}

void Optimizer::load_state(const std::map<std::string, torch::Tensor>& saved) {
  const std::string fix = "\n    fix: resume with the optim.name, optimizer settings and model the checkpoint was saved with";
  std::set<std::string> expected;
  for (const auto& e : state_) {
    expected.insert(e.name);
    auto it = saved.find(e.name);
    if (it == saved.end())
      throw data_error("optimizer state: the saved state has no '" + e.name + "' (" + describe() + " needs it)" + fix);
    if (it->second.sizes() != e.tensor.sizes() || it->second.scalar_type() != e.tensor.scalar_type())
      throw data_error("optimizer state: '" + e.name + "' is " + shape_str(it->second) + " in the saved state but " +
                       shape_str(e.tensor) + " here" + fix);
  }
  for (const auto& [name, _] : saved)
    if (!expected.count(name))
      throw data_error("optimizer state: the saved state has '" + name + "', which " + describe() + " does not use" + fix);
  torch::NoGradGuard no_grad;
  for (auto& e : state_) e.tensor.copy_(saved.at(e.name));
}

torch::Device device_of(const std::vector<ParamGroup>& groups) {
  for (const auto& g : groups)
    if (!g.params.empty()) return g.params.front().device();
  return torch::kCPU;
}

std::string describe_kernel(UpdateKernel kernel, const std::vector<ParamGroup>& groups) {
  if (kernel == UpdateKernel::kForeach) return "foreach (ATen multi-tensor ops)";
  return device_of(groups).is_cuda() ? "fused (CUDA kernel)" : "fused (C++ loop)";
}

void for_each_fp32_working_set(const ParamGroup& group,
                               const std::function<void(std::vector<torch::Tensor>&, std::vector<torch::Tensor>&,
                                                        const std::vector<size_t>&)>& update) {
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> params, grads;
  std::vector<size_t> indices;
  std::vector<size_t> bf16;
  for (size_t i = 0; i < group.params.size(); ++i) {
    const at::Tensor& p = group.params[i];
    if (!p.grad().defined()) continue;
    if (p.scalar_type() == at::kBFloat16) {
      bf16.push_back(i);
      continue;
    }
    params.push_back(p);
    grads.push_back(p.grad());
    indices.push_back(i);
  }
  if (!params.empty()) update(params, grads, indices);
  for (size_t i : bf16) {
    const at::Tensor& p = group.params[i];
    std::vector<at::Tensor> p32{p.to(at::kFloat)}, g32{p.grad().to(at::kFloat)};
    update(p32, g32, {i});
    stochastic_round_to_bf16(p32[0], p);
  }
}

}  // namespace gputrain
