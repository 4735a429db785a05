// precision.mode as the training step sees it:
//   fp32       plain fp32.
//   tf32       fp32 tensors, TF32 tensor-core matmuls/convolutions on Ampere+
//              GPUs (10-bit mantissa products, fp32 accumulation); no effect on CPU.
//   bf16       mixed: fp32 weights, gradients and optimizer state; forward
//              and backward under autocast to bf16 (CPU and CUDA).
//   fp16       mixed like bf16 with fp16 compute, plus loss scaling
//              (precision/loss_scaler.h): steps with inf/nan gradients are skipped.
//   bf16-pure  weights and gradients in bf16, no autocast; every optimizer
//              keeps its state in fp32 (or 8-bit), computes each update in fp32
//              and writes the weight back with stochastic rounding
//              (optim/optimizer.h, fused_update.h), so updates below bf16's
//              resolution are not lost.
// The loss itself is always computed from fp32 logits.
#pragma once
#include <torch/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/settings.h"
#include "precision/autocast_guard.h"
#include "precision/loss_scaler.h"

namespace gputrain {

class Precision {
 public:
  Precision(const PrecisionSettings& p, torch::Device device);

  // The dtype parameters are stored in (bf16 for bf16-pure, else fp32).
  torch::ScalarType weight_dtype() const;
  // Enters autocast for a forward pass when the mode uses it.
  bool uses_autocast() const;
  c10::ScalarType autocast_dtype() const;
  c10::DeviceType device_type() const { return device_.type(); }

  // The loss to call backward on (scaled under fp16).
  torch::Tensor for_backward(const torch::Tensor& loss) const { return scaler_ ? scaler_->scale(loss) : loss; }
  // After backward, before clipping: unscales fp16 gradients; true = skip this step.
  bool unscale_and_check(const std::vector<torch::Tensor>& params);
  void update(bool skipped);

  bool has_scaler() const { return scaler_ != nullptr; }
  double loss_scale() const { return scaler_ ? scaler_->scale_value() : 1.0; }
  int64_t skipped_steps() const { return scaler_ ? scaler_->skipped_steps() : 0; }
  LossScaler* scaler() { return scaler_.get(); }  // null without fp16
  const LossScaler* scaler() const { return scaler_.get(); }
  std::string describe() const;  // one line for the log

 private:
  PrecisionMode mode_;
  torch::Device device_;
  std::unique_ptr<LossScaler> scaler_;
};

// The autocast a forward pass runs under (none without `precision`, or when it does not autocast).
AutocastGuard autocast_for(const Precision* precision);

}  // namespace gputrain
