// fp16 loss scaling: the loss is multiplied by S before backward so small
// gradients do not flush to zero in fp16; gradients are divided by S before
// clipping and the optimizer. If any gradient is inf/nan the step is skipped
// and S shrinks (backoff); after growth_interval clean steps S grows. A
// fixed scale never changes but still skips non-finite steps. The state is
// two device tensors updated by ATen's AMP kernels (CPU and CUDA).
#pragma once
#include <torch/types.h>

#include <vector>

#include "config/settings.h"

namespace gputrain {

// What a checkpoint keeps of a scaler (exact: the scale is a float32 value).
struct LossScalerState {
  double scale = 1.0;
  int64_t growth_tracker = 0;
  int64_t skipped_steps = 0;
};

class LossScaler {
 public:
  LossScaler(const PrecisionSettings& p, torch::Device device);

  torch::Tensor scale(const torch::Tensor& loss) const { return loss * scale_; }
  // Divides every defined gradient by the scale in place; returns whether
  // any was inf or nan (one host sync), in which case the step must be skipped.
  bool unscale_and_check(const std::vector<torch::Tensor>& params);
  // Grows or backs off the scale after a step that found (or not) inf/nan.
  void update(bool found_inf);

  double scale_value() const { return scale_.item<double>(); }
  int64_t skipped_steps() const { return skipped_; }

  LossScalerState state() const;
  void load_state(const LossScalerState& s);

 private:
  bool dynamic_;
  double growth_, backoff_;
  int64_t interval_;
  torch::Tensor scale_;           // float32 [1]
  torch::Tensor growth_tracker_;  // int32 [1]: clean steps since the last change
  torch::Tensor found_inf_;       // float32 [1]
  int64_t skipped_ = 0;
};

}  // namespace gputrain
