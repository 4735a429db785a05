#include "precision/precision.h"

#include <ATen/Context.h>

namespace gputrain {

Precision::Precision(const PrecisionSettings& p, torch::Device device) : mode_(p.mode), device_(device) {
  // TF32 is a process-wide ATen switch; set it either way so fp32 really is fp32.
  const bool tf32 = mode_ == PrecisionMode::kTf32;
  at::globalContext().setAllowTF32CuBLAS(tf32);
  at::globalContext().setAllowTF32CuDNN(tf32);
  if (mode_ == PrecisionMode::kFp16) scaler_ = std::make_unique<LossScaler>(p, device);
}

torch::ScalarType Precision::weight_dtype() const {
  return mode_ == PrecisionMode::kBf16Pure ? torch::kBFloat16 : torch::kFloat;
}

bool Precision::uses_autocast() const { return mode_ == PrecisionMode::kBf16 || mode_ == PrecisionMode::kFp16; }

c10::ScalarType Precision::autocast_dtype() const {
  return mode_ == PrecisionMode::kFp16 ? c10::kHalf : c10::kBFloat16;
}

bool Precision::unscale_and_check(const std::vector<torch::Tensor>& params) {
  return scaler_ ? scaler_->unscale_and_check(params) : false;
}

void Precision::update(bool skipped) {
  if (scaler_) scaler_->update(skipped);
}

std::string Precision::describe() const {
  switch (mode_) {
    case PrecisionMode::kFp32:
      return "fp32";
    case PrecisionMode::kTf32:
      return device_.is_cuda() ? "tf32 (TF32 tensor-core matmuls, fp32 tensors)"
                               : "tf32 has no effect on CPU: training in fp32";
    case PrecisionMode::kBf16:
      return "bf16 mixed precision (fp32 weights and optimizer, bf16 autocast)";
    case PrecisionMode::kFp16:
      return "fp16 mixed precision (fp32 weights and optimizer, fp16 autocast, loss scale " +
             std::to_string(static_cast<int64_t>(loss_scale())) + ")";
    case PrecisionMode::kBf16Pure:
      return "bf16-pure (bf16 weights and gradients; fp32 optimizer state and update, stochastic rounding)";
  }
  return "?";
}

AutocastGuard autocast_for(const Precision* p) {
  return AutocastGuard(p != nullptr && p->uses_autocast(), p ? p->device_type() : c10::DeviceType::CPU,
                       p ? p->autocast_dtype() : c10::kFloat);
}

}  // namespace gputrain
