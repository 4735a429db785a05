#include "optim/adamw8bit.h"

#include <ATen/ATen.h>

#include <stdexcept>

#include "util/error.h"

namespace gputrain {

bool adamw8bit_quantizes(const std::string& name, int64_t numel, const AdamW8bitSettings& s) {
  return numel >= s.min_8bit_size && !(s.embeddings_32bit && is_embedding(name));
}

AdamW8bit::AdamW8bit(std::vector<ParamGroup> groups, AdamWOptions opts, AdamW8bitSettings rule,
                     const RowSharding* sharding)
    : Optimizer(std::move(groups)), opts_(opts) {
  const torch::Device device = device_of(groups_);
  if (!fused_update_available(device))
    throw runtime_error("adamw8bit has no kernel for device " + device.str() + " in this build");
  maps_ = make_quant_maps(device.is_meta() ? torch::Device(torch::kCPU) : device);  // (meta: shapes alone)
  const uint8_t zero_m = zero_code(maps_.signed_code.cpu()), zero_v = zero_code(maps_.unsigned_code.cpu());
  for (const auto& g : groups_) {
    std::vector<Slot> slots;
    for (size_t i = 0; i < g.params.size(); ++i) {
      const at::Tensor& p = g.params[i];
      const std::string& n = g.names[i];
      if (!p.is_contiguous())
        throw runtime_error("adamw8bit: parameter " + n + " is not contiguous; the fused update needs it to be");
      Slot s;
      int64_t whole = p.numel();  // of the whole parameter, when p is a shard
      const bool sharded = sharding && sharding->params.count(n) && p.dim() > 0 && p.size(0) > 0;
      if (sharded) whole = sharding->params.at(n).whole_rows * (p.numel() / p.size(0));
      s.quantized = adamw8bit_quantizes(n, whole, rule);
      if (s.quantized && sharded && p.numel() % kernels::kQuantBlock != 0)
        throw std::logic_error("adamw8bit: the shard of " + n + " does not end on a quantization block");
      s.step = add_step_counter(n);
      total_elements_ += whole;
      if (s.quantized) {
        const int64_t blocks = (p.numel() + kernels::kQuantBlock - 1) / kernels::kQuantBlock;
        const auto bytes = p.options().dtype(at::kByte);
        s.exp_avg = add_state(n, "exp_avg_8bit", at::full(p.sizes(), zero_m, bytes));
        s.exp_avg_sq = add_state(n, "exp_avg_sq_8bit", at::full(p.sizes(), zero_v, bytes));
        const auto scales = p.options().dtype(at::kFloat);
        s.absmax_avg = add_state(n, "exp_avg_absmax", at::zeros({blocks}, scales), StateLayout::kBlocks);
        s.absmax_avg_sq = add_state(n, "exp_avg_sq_absmax", at::zeros({blocks}, scales), StateLayout::kBlocks);
        ++quantized_tensors_;
        quantized_elements_ += whole;
      } else {
        s.exp_avg = add_state(n, "exp_avg", at::zeros(p.sizes(), p.options().dtype(at::kFloat)));
        s.exp_avg_sq = add_state(n, "exp_avg_sq", at::zeros(p.sizes(), p.options().dtype(at::kFloat)));
      }
      slots.push_back(std::move(s));
    }
    slots_.push_back(std::move(slots));
  }
}

std::string AdamW8bit::describe() const {
  int64_t tensors = 0;
  for (const auto& g : groups_) tensors += static_cast<int64_t>(g.params.size());
  return fmt::format(
      "adamw8bit, {}; 8-bit moments for {} of {} tensors ({:.1f}% of parameters)",
      describe_kernel(UpdateKernel::kFused, groups_), quantized_tensors_, tensors,
      total_elements_ ? 100.0 * static_cast<double>(quantized_elements_) / static_cast<double>(total_elements_) : 0.0);
}

void AdamW8bit::step(double lr) {
  torch::NoGradGuard no_grad;
  std::vector<FusedAdamWItem> full;
  std::vector<FusedAdamW8bitItem> quantized;
  size_t serial = 0;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const ParamGroup& g = groups_[gi];
    for (size_t i = 0; i < g.params.size(); ++i, ++serial) {
      const at::Tensor& p = g.params[i];
      if (!p.grad().defined()) continue;
      Slot& s = slots_[gi][i];
      const int64_t t = ++count(s.step);
      const auto scalars = adamw_scalars(opts_, t, lr * g.lr_scale, g.weight_decay);
      const at::Tensor grad = p.grad().to(p.scalar_type()).contiguous();
      if (s.quantized)
        quantized.push_back(
            {p, grad, s.exp_avg, s.exp_avg_sq, s.absmax_avg, s.absmax_avg_sq, scalars, rounding_seed(t, serial)});
      else full.push_back({p, grad, s.exp_avg, s.exp_avg_sq, scalars, rounding_seed(t, serial)});
    }
  }
  fused_adamw(full);
  fused_adamw8bit(quantized, maps_);
}

// optim.name: adamw8bit (optim/optimizer_spec.h): fused only (the quantized moments need the one pass).
const OptimizerSpec& adamw8bit_spec() {
  static const OptimizerSpec spec{
      .name = OptimName::kAdamW8bit,
      .summary = "bitsandbytes' AdamW8bit: both moments block-wise 8-bit",
      .keys = {"optim.betas", "optim.eps", "optim.adamw8bit."},
      .foreach = false,
      .fused = [](const torch::Device&) { return true; },
      .state_rule =
          [](const OptimSettings& o) {
            return "2 x (1 byte + 4/256) per parameter of tensors >= " + std::to_string(o.adamw8bit.min_8bit_size) +
                   " elements" + (o.adamw8bit.embeddings_32bit ? " (not embeddings)" : "") + ", 8 bytes for the rest";
          },
      .state_bytes =
          [](const OptimSettings& o, const ParamShape& p) {
            const int64_t n = p.numel();
            if (!adamw8bit_quantizes(p.name, n, o.adamw8bit)) return 8 * n;
            return 2 * n + 2 * 4 * ((n + kernels::kQuantBlock - 1) / kernels::kQuantBlock);
          },
      .state_block = kernels::kQuantBlock,
      .blocked = [](const OptimSettings& o, const std::string& parameter,
                    int64_t numel) { return adamw8bit_quantizes(parameter, numel, o.adamw8bit); },
      .make = [](std::vector<ParamGroup> groups, const OptimSettings& o, UpdateKernel,
                 const RowSharding* sharding) -> std::unique_ptr<Optimizer> {
        return std::make_unique<AdamW8bit>(std::move(groups), AdamWOptions{o.betas[0], o.betas[1], o.eps}, o.adamw8bit,
                                           sharding);
      }};
  return spec;
}

}  // namespace gputrain
