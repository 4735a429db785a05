// A tensor's shape as text, for error messages that name a mismatch
// (checkpoint weights, Hugging Face files, a captured CUDA graph's inputs), and dtypes by name.
#pragma once
#include <torch/types.h>

#include <map>
#include <string>

namespace gputrain {

// "[3, 4]"; "[]" for a scalar.
std::string shape_str(at::IntArrayRef shape);
std::string shape_str(const torch::Tensor& t);

// The floating dtypes by the names torch and transformers give them: "float32", "bfloat16", "float16".
const std::map<std::string, torch::ScalarType>& float_dtypes_by_name();

}  // namespace gputrain
