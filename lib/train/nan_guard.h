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

}  // namespace gputrain
