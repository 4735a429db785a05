// A tensor's shape as text, for error messages that name a mismatch
// (checkpoint weights, Hugging Face files, a captured CUDA graph's inputs).
#pragma once
#include <torch/types.h>

#include <string>

namespace gputrain {

// "[3, 4]"; "[]" for a scalar.
std::string shape_str(at::IntArrayRef shape);
std::string shape_str(const torch::Tensor& t);

}  // namespace gputrain
