// train.nan_policy: what a step whose loss or gradient norm is inf/nan does.
// The check costs one host sync per step (a flag read before the optimizer
// step, so that skip can drop the update and abort can name the culprit
// before anything is changed).
#pragma once
#include <torch/types.h>

#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "config/settings.h"

namespace gputrain {

// Whether the loss and the gradient norm are both finite (one host sync).
bool step_is_finite(const torch::Tensor& loss, const torch::Tensor& grad_norm);

// Where the non-finite values are: the first parameter (in model order)
// whose value is not finite, else the first whose gradient is not, with how
// many of its elements are bad. "" when everything is finite.
std::string first_non_finite(const std::vector<NamedTensor>& params);

// The message for a non-finite step under `policy`.
std::string non_finite_message(int64_t step, double loss, double grad_norm, const std::string& culprit,
                               NanPolicy policy);

// A skipped step (fp16 overflow, a non-finite loss or gradients, a loss spike) is warned about (an
// overflow here; the others where they are found); many in a row stop the run: backing off the loss
// scale cannot help when the forward pass itself overflows fp16.
class SkipCounter {
 public:
  // Step `step`'s outcome; a runtime_error naming the cause and the fix after 50 skipped in a row.
  void count(int64_t step, bool overflow, bool nan_skip, bool spike_skip, double loss_scale);

 private:
  int64_t consecutive_ = 0;
};

}  // namespace gputrain
