#include "optim/make_optimizer.h"

#include "config/schema.h"
#include "optim/adafactor.h"
#include "optim/adamw.h"
#include "optim/adamw8bit.h"
#include "optim/lion.h"
#include "optim/sgd.h"

namespace gputrain {

std::string optim_name(OptimName name) {
  Settings s;
  s.optim.name = name;
  return settings_to_json(s)["optim"]["name"].get<std::string>();
}

KernelChoice choose_kernel(OptimName name, OptimImpl impl, const torch::Device& device) {
  const std::string n = optim_name(name);
  if (name == OptimName::kAdamW8bit) {
    if (impl == OptimImpl::kForeach)
      return {UpdateKernel::kFused, "optim.impl: foreach: adamw8bit has no foreach implementation; using fused"};
    return {UpdateKernel::kFused, ""};
  }
  if (name != OptimName::kAdamW) {  // adafactor, lion, sgd: no fused kernel
    if (impl == OptimImpl::kFused)
      return {UpdateKernel::kForeach, "optim.impl: fused: " + n + " has no fused kernel; using foreach"};
    return {UpdateKernel::kForeach, ""};
  }
  if (impl == OptimImpl::kForeach) return {UpdateKernel::kForeach, ""};
  if (!fused_update_available(device))
    return {UpdateKernel::kForeach, impl == OptimImpl::kFused ? "optim.impl: fused: no fused " + n + " kernel for " +
                                                                    device.str() + " in this build; using foreach"
                                                              : ""};
  return {UpdateKernel::kFused, ""};
}

namespace {

std::unique_ptr<Optimizer> construct(std::vector<ParamGroup> groups, const OptimSettings& o,
                                     const RowSharding* sharding) {
  const KernelChoice choice = choose_kernel(o.name, o.impl, device_of(groups));
  if (!choice.notice.empty()) spdlog::warn("{}", choice.notice);
  const AdamWOptions adam{o.betas[0], o.betas[1], o.eps};
  switch (o.name) {
    case OptimName::kAdamW:
      return std::make_unique<AdamW>(std::move(groups), adam, choice.kernel);
    case OptimName::kAdamW8bit:
      return std::make_unique<AdamW8bit>(std::move(groups), adam, o.adamw8bit, sharding);
    case OptimName::kAdafactor:
      return std::make_unique<Adafactor>(std::move(groups), o.adafactor);
    case OptimName::kLion:
      return std::make_unique<Lion>(std::move(groups), o.lion);
    case OptimName::kSgd:
      return std::make_unique<Sgd>(std::move(groups), o.sgd);
  }
  throw std::logic_error("make_optimizer: unknown optimizer");
}

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(std::vector<ParamGroup> groups, const OptimSettings& o,
                                          std::optional<RowSharding> sharding) {
  std::unique_ptr<Optimizer> made = construct(std::move(groups), o, sharding ? &*sharding : nullptr);
  if (sharding && made->takes_row_sharding()) made->set_row_sharding(std::move(*sharding));
  return made;
}

std::unique_ptr<Optimizer> make_optimizer(const torch::nn::Module& model, const OptimSettings& o) {
  return make_optimizer(make_param_groups(model, o), o);
}

std::string optimizer_state_rule(const OptimSettings& o) {
  switch (o.name) {
    case OptimName::kAdamW:
      return "2 fp32 moments = 8 bytes x parameters";
    case OptimName::kAdamW8bit:
      return "2 x (1 byte + 4/256) per parameter of tensors >= " + std::to_string(o.adamw8bit.min_8bit_size) +
             " elements" + (o.adamw8bit.embeddings_32bit ? " (not embeddings)" : "") + ", 8 bytes for the rest";
    case OptimName::kAdafactor:
      return std::string("4 bytes x (rows + cols) per matrix, 4 x size per vector") +
             (o.adafactor.beta1 > 0 ? ", + 4 bytes x parameters of momentum" : "");
    case OptimName::kLion:
      return "1 fp32 momentum = 4 bytes x parameters";
    case OptimName::kSgd:
      return o.sgd.momentum > 0 ? "1 fp32 momentum buffer = 4 bytes x parameters" : "none";
  }
  return "";
}

int64_t estimate_state_bytes(const OptimSettings& o, const std::vector<ParamShape>& params) {
  constexpr int64_t kStep = 8;  // the int64 step counter of every parameter
  int64_t bytes = 0;
  for (const auto& p : params) {
    if (!p.trainable) continue;  // frozen (LoRA's base): no state
    const int64_t n = p.numel();
    bytes += kStep;
    switch (o.name) {
      case OptimName::kAdamW:
        bytes += 8 * n;
        break;
      case OptimName::kAdamW8bit:
        if (adamw8bit_quantizes(p.name, n, o.adamw8bit))
          bytes += 2 * n + 2 * 4 * ((n + kernels::kQuantBlock - 1) / kernels::kQuantBlock);
        else bytes += 8 * n;
        break;
      case OptimName::kAdafactor:
        if (p.sizes.size() >= 2) {
          const int64_t last = p.sizes.back(), second_last = p.sizes[p.sizes.size() - 2];
          bytes += 4 * (n / last + n / second_last);
        } else {
          bytes += 4 * n;
        }
        if (o.adafactor.beta1 > 0) bytes += 4 * n;
        break;
      case OptimName::kLion:
        bytes += 4 * n;
        break;
      case OptimName::kSgd:
        bytes += o.sgd.momentum > 0 ? 4 * n : 0;
        break;
    }
  }
  return bytes;
}

}  // namespace gputrain
