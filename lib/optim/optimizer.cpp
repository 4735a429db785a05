#include "optim/optimizer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <functional>
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
    throw std::invalid_argument(
        "optimizer: a bf16 copy needs an optimizer that writes them, an fp32 parameter it "
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

torch::Tensor Optimizer::add_state(const std::string& param_name, const std::string& slot, torch::Tensor t,
                                   StateLayout layout) {
  state_.push_back({param_name + "." + slot, t, t.dim() > 0 ? layout : StateLayout::kWhole});
  return t;
}

void Optimizer::adopt_state(const Optimizer& inner) {
  for (const StateEntry& e : inner.state()) state_.push_back(e);
}

std::map<std::string, StateLayout> Optimizer::state_following_parameters() const {
  std::map<std::string, StateLayout> layouts;
  for (const auto& e : state_)
    if (e.layout != StateLayout::kWhole) layouts[e.name] = e.layout;
  return layouts;
}

torch::Tensor Optimizer::add_step_counter(const std::string& param_name) {
  return add_state(param_name, "step", at::zeros({}, at::TensorOptions().dtype(at::kLong)), StateLayout::kWhole);
}

static std::string shape_and_dtype(const at::Tensor& t) {
  std::ostringstream s;
  s << t.sizes() << " " << t.scalar_type();
  return s.str();
}

void Optimizer::load_state(const std::map<std::string, torch::Tensor>& saved) {
  const std::string fix =
      "\n    fix: resume with the optim.name, optimizer settings and model the checkpoint was saved with";
  std::set<std::string> expected;
  for (const auto& e : state_) {
    expected.insert(e.name);
    auto it = saved.find(e.name);
    if (it == saved.end())
      throw data_error("optimizer state: the saved state has no '" + e.name + "' (" + describe() + " needs it)" + fix);
    if (it->second.sizes() != e.tensor.sizes() || it->second.scalar_type() != e.tensor.scalar_type())
      throw data_error("optimizer state: '" + e.name + "' is " + shape_and_dtype(it->second) +
                       " in the saved state but " + shape_and_dtype(e.tensor) + " here" + fix);
  }
  for (const auto& [name, _] : saved)
    if (!expected.count(name))
      throw data_error("optimizer state: the saved state has '" + name + "', which " + describe() + " does not use" +
                       fix);
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

namespace {

// A working set holds up to this many elements on the CPU, and at least this
// many on a GPU (4 MiB of fp32 values: small tensors are batched everywhere).
constexpr int64_t kMinWorkingSet = int64_t{1} << 20;

// Each tensor's place in a working set starts at a multiple of 128 elements (512 bytes in fp32,
// the CUDA allocator's alignment): multi-tensor kernels take their vectorized path only when
// every tensor is aligned, and reductions over a tensor then run as they would on the tensor
// alone (the same partial sums, so the same results).
int64_t aligned_size(int64_t numel) { return (numel + 127) / 128 * 128; }

}  // namespace

// The bf16 parameters are updated together in fp32: their values and gradients are copied into one
// flat fp32 buffer each (a view per tensor), the update runs once over the views, and the results go
// back through one stochastic rounding of the whole buffer: a few multi-tensor launches per set
// instead of a few per tensor.
Fp32WorkingSet::Fp32WorkingSet(const ParamGroup& group, std::vector<size_t> members) : indices(std::move(members)) {
  for (size_t i : indices) {
    originals_.push_back(group.params[i]);
    grads.push_back(group.params[i].grad());
  }
  if (indices.empty() || originals_.front().scalar_type() != at::kBFloat16) {
    params = originals_;
    return;
  }
  int64_t total = 0;
  for (const at::Tensor& p : originals_) total += aligned_size(p.numel());
  const auto fp32 = originals_.front().options().dtype(at::kFloat);
  flat_params_ = at::empty({total}, fp32);
  flat_grads_ = at::empty({total}, fp32);
  params = views_of(flat_params_);
  std::vector<at::Tensor> grads32 = views_of(flat_grads_);
  at::_foreach_copy_(params, originals_);
  at::_foreach_copy_(grads32, grads);
  grads = std::move(grads32);
}

std::vector<at::Tensor> Fp32WorkingSet::views_of(const at::Tensor& flat) const {
  std::vector<at::Tensor> views;
  int64_t offset = 0;
  for (const at::Tensor& p : originals_) {
    views.push_back(flat.narrow(0, offset, p.numel()).view(p.sizes()));
    offset += aligned_size(p.numel());
  }
  return views;
}

void Fp32WorkingSet::finish() {
  grads.clear();
  if (!flat_params_.defined()) return;
  flat_grads_.reset();  // before the rounding's temporaries: a lower peak
  at::Tensor rounded = at::empty({flat_params_.numel()}, flat_params_.options().dtype(at::kBFloat16));
  stochastic_round_to_bf16(flat_params_, rounded);
  at::_foreach_copy_(originals_, views_of(rounded));
  params.clear();
  flat_params_.reset();
}

std::vector<std::vector<size_t>> fp32_working_sets(const ParamGroup& group, int64_t budget) {
  std::vector<size_t> fp32, bf16;
  for (size_t i = 0; i < group.params.size(); ++i)
    if (group.params[i].grad().defined()) (group.params[i].scalar_type() == at::kBFloat16 ? bf16 : fp32).push_back(i);
  std::vector<std::vector<size_t>> sets;
  for (const std::vector<size_t>* members : {&fp32, &bf16}) {
    std::vector<size_t> set;
    int64_t set_elements = 0;
    for (size_t i : *members) {
      const int64_t n = group.params[i].numel();
      if (!set.empty() && set_elements + n > budget) {
        sets.push_back(std::move(set));
        set.clear();
        set_elements = 0;
      }
      set.push_back(i);
      set_elements += n;
    }
    if (!set.empty()) sets.push_back(std::move(set));
  }
  return sets;
}

void for_each_fp32_working_set(const ParamGroup& group, const WorkingSetUpdate& update) {
  for_each_fp32_working_set(group, update, 0);
}

void for_each_fp32_working_set(const ParamGroup& group, const WorkingSetUpdate& update, int64_t min_elements) {
  torch::NoGradGuard no_grad;
  int64_t largest = 0;
  bool on_gpu = false;
  for (const at::Tensor& p : group.params) {
    if (!p.grad().defined()) continue;
    largest = std::max(largest, p.numel());
    on_gpu = p.is_cuda();
  }
  // On a GPU, working sets as large as the largest tensor: fewest launches, and the transient
  // memory (an update's temporaries, as SGD's decayed gradients) is what updating that tensor alone
  // would take, not a copy of every gradient. On the CPU an op costs its arithmetic, not a launch,
  // so sets stay small enough for the cache to carry values from op to op.
  const int64_t budget = std::max(on_gpu ? std::max(largest, kMinWorkingSet) : kMinWorkingSet, min_elements);
  for (std::vector<size_t>& members : fp32_working_sets(group, budget)) {
    Fp32WorkingSet set(group, std::move(members));
    update(set.params, set.grads, set.indices);
    set.finish();
  }
}

}  // namespace gputrain
