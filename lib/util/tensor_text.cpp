#include "util/tensor_text.h"

namespace gputrain {

std::string shape_str(at::IntArrayRef shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string shape_str(const torch::Tensor& t) { return shape_str(t.sizes()); }

const std::map<std::string, torch::ScalarType>& float_dtypes_by_name() {
  static const std::map<std::string, torch::ScalarType> types = {
      {"float32", torch::kFloat}, {"bfloat16", torch::kBFloat16}, {"float16", torch::kHalf}};
  return types;
}

}  // namespace gputrain
