#include "checkpoint/module_weights.h"

#include <map>
#include <set>

#include "util/error.h"

namespace gputrain {
namespace {

std::string shape_str(const torch::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

// "a, b, c and 4 more"
std::string first_names(const std::vector<std::string>& names) {
  std::string s;
  const size_t shown = std::min<size_t>(names.size(), 4);
  for (size_t i = 0; i < shown; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > shown) s += " and " + std::to_string(names.size() - shown) + " more";
  return s;
}

}  // namespace

std::vector<NamedTensor> module_weights(const torch::nn::Module& m) {
  std::vector<NamedTensor> out;
  for (const auto& item : m.named_parameters(/*recurse=*/true)) out.push_back({item.key(), item.value()});
  return out;
}

void load_module_weights(torch::nn::Module& m, const std::vector<NamedTensor>& weights, const std::string& source,
                         const std::string& fix) {
  std::map<std::string, torch::Tensor> given;
  for (const auto& w : weights) given[w.name] = w.tensor;
  const auto params = m.named_parameters(/*recurse=*/true);
  std::vector<std::string> missing, wrong_shape;
  std::set<std::string> expected;
  for (const auto& item : params) {
    expected.insert(item.key());
    auto it = given.find(item.key());
    if (it == given.end())
      missing.push_back(item.key());
    else if (it->second.sizes() != item.value().sizes())
      wrong_shape.push_back(item.key() + " is " + shape_str(it->second) + " there but " + shape_str(item.value()) +
                            " in this model");
  }
  std::vector<std::string> unexpected;
  for (const auto& [name, _] : given)
    if (!expected.count(name)) unexpected.push_back(name);
  const std::string tail = "\n    fix: " + fix;
  if (!wrong_shape.empty())
    throw data_error(source + ": the weights do not fit this model: " + first_names(wrong_shape) + tail);
  if (!missing.empty()) throw data_error(source + ": no weights for " + first_names(missing) + tail);
  if (!unexpected.empty())
    throw data_error(source + ": weights this model does not have: " + first_names(unexpected) + tail);
  torch::NoGradGuard no_grad;
  for (const auto& item : params) item.value().copy_(given.at(item.key()));
}

}  // namespace gputrain
