#include "optim/make_optimizer.h"

#include "config/schema.h"
#include "optim/host_offloaded_optimizer.h"
#include "optim/optimizer_specs.h"
#include "optim/streamed_optimizer.h"
#include "util/offload_file.h"

namespace gputrain {

std::string optim_name(OptimName name) {
  Settings s;
  s.optim.name = name;
  return settings_to_json(s)["optim"]["name"].get<std::string>();
}

KernelChoice choose_kernel(OptimName name, OptimImpl impl, const torch::Device& device) {
  const OptimizerSpec& spec = optimizer_spec(name);
  const std::string n = optim_name(name);
  const bool fused_here = spec.fused && spec.fused(device);
  if (!spec.foreach)  // (every optimizer has one of the two)
    return {UpdateKernel::kFused, impl == OptimImpl::kForeach
                                      ? "optim.impl: foreach: " + n + " has no foreach implementation; using fused"
                                      : ""};
  if (impl == OptimImpl::kForeach) return {UpdateKernel::kForeach, ""};
  if (fused_here) return {UpdateKernel::kFused, ""};
  if (impl != OptimImpl::kFused) return {UpdateKernel::kForeach, ""};
  if (!spec.fused) return {UpdateKernel::kForeach, "optim.impl: fused: " + n + " has no fused kernel; using foreach"};
  return {UpdateKernel::kForeach,
          "optim.impl: fused: no fused " + n + " kernel for " + device.str() + " in this build; using foreach"};
}

std::unique_ptr<Optimizer> make_optimizer(std::vector<ParamGroup> groups, const OptimSettings& o,
                                          std::optional<RowSharding> sharding, std::optional<MatrixSharding> matrices) {
  const KernelChoice choice = choose_kernel(o.name, o.impl, device_of(groups));
  if (!choice.notice.empty()) spdlog::warn("{}", choice.notice);
  std::unique_ptr<Optimizer> made =
      optimizer_spec(o.name).make(std::move(groups), o, choice.kernel, sharding ? &*sharding : nullptr);
  if (sharding && made->takes_row_sharding()) made->set_row_sharding(std::move(*sharding));
  if (matrices && made->takes_matrix_sharding()) made->set_matrix_sharding(std::move(*matrices));
  return made;
}

std::unique_ptr<Optimizer> make_optimizer(std::vector<ParamGroup> groups, const OptimSettings& o,
                                          const std::optional<RowSharding>& sharding,
                                          const std::optional<MatrixSharding>& matrices,
                                          const OptimizerPlacement& placement) {
  auto make = [&](std::vector<ParamGroup> g) { return make_optimizer(std::move(g), o, sharding, matrices); };
  switch (placement.state) {
    case OptimizerPlacement::State::kMemory:
      return make(std::move(groups));
    case OptimizerPlacement::State::kHost:
      return std::make_unique<HostOffloadedOptimizer>(std::move(groups), make);
    case OptimizerPlacement::State::kFile:
      return std::make_unique<StreamedOptimizer>(
          std::move(groups), placement.units, make,
          std::make_unique<OffloadFile>(placement.file_dir, "parallel.offload_dir"), placement.copies);
  }
  throw std::logic_error("make_optimizer: an optimizer placement without a case");
}

std::unique_ptr<Optimizer> make_optimizer(const torch::nn::Module& model, const OptimSettings& o) {
  return make_optimizer(make_param_groups(model, o), o);
}

std::string optimizer_state_rule(const OptimSettings& o) { return optimizer_spec(o.name).state_rule(o); }

int64_t estimate_state_bytes(const OptimSettings& o, const std::vector<ParamShape>& params) {
  constexpr int64_t kStep = 8;  // the int64 step counter of every parameter
  const OptimizerSpec& spec = optimizer_spec(o.name);
  int64_t bytes = 0;
  for (const auto& p : params)
    if (p.trainable) bytes += kStep + spec.state_bytes(o, p);  // frozen (LoRA's base): no state
  return bytes;
}

}  // namespace gputrain
