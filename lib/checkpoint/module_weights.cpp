#include "checkpoint/module_weights.h"

#include <map>
#include <set>

#include "util/error.h"
#include "util/tensor_text.h"

namespace gputrain {
std::string first_names(const std::vector<std::string>& names) {
  std::string s;
  const size_t shown = std::min<size_t>(names.size(), 4);
  for (size_t i = 0; i < shown; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > shown) s += " and " + std::to_string(names.size() - shown) + " more";
  return s;
}

void load_module_weights(torch::nn::Module& m, const std::vector<NamedTensor>& weights, const std::string& source,
                         const std::string& fix, const std::function<bool(const std::string&)>& covers) {
  std::map<std::string, torch::Tensor> given;
  for (const auto& w : weights) given[w.name] = w.tensor;
  std::vector<std::pair<std::string, torch::Tensor>> params;
  for (const auto& item : m.named_parameters(/*recurse=*/true))
    if (!covers || covers(item.key())) params.emplace_back(item.key(), item.value());
  std::vector<std::string> missing, wrong_shape;
  std::set<std::string> expected;
  for (const auto& [key, value] : params) {
    expected.insert(key);
    auto it = given.find(key);
    if (it == given.end()) missing.push_back(key);
    else if (it->second.sizes() != value.sizes())
      wrong_shape.push_back(key + " is " + shape_str(it->second) + " there but " + shape_str(value) + " in this model");
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
  for (auto& [key, value] : params) value.copy_(given.at(key));
}

}  // namespace gputrain
