#include "checkpoint/expert_biases.h"

#include <algorithm>

#include "model/moe.h"
#include "util/error.h"

namespace gputrain {

nlohmann::json expert_biases_json(const std::map<int64_t, torch::Tensor>& bias) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [block, b] : bias) {
    const torch::Tensor values = b.contiguous();
    j[mixture_layer_name(block)] =
        std::vector<float>(values.data_ptr<float>(), values.data_ptr<float>() + values.numel());
  }
  return j;
}

std::map<int64_t, torch::Tensor> read_expert_biases(const nlohmann::json& saved, const ModelSettings& m,
                                                    const std::string& checkpoint, const std::string& fix) {
  const int64_t experts = m.moe.experts;
  std::map<int64_t, torch::Tensor> bias;
  for (int64_t block = 0; block < m.n_layer; ++block) {
    if (!m.moe.is_moe_block(block)) continue;
    const auto it = saved.is_object() ? saved.find(mixture_layer_name(block)) : saved.end();
    if (it == saved.end() || !it->is_array() || it->size() != static_cast<size_t>(experts) ||
        !std::all_of(it->begin(), it->end(), [](const nlohmann::json& v) { return v.is_number(); }))
      throw data_error("checkpoint '" + checkpoint + "': trainer.json's moe_expert_bias has no " +
                       std::to_string(experts) + " biases for " + mixture_layer_name(block) + "\n    fix: " + fix);
    bias[block] = torch::tensor(it->get<std::vector<float>>(), torch::kFloat);
  }
  if (saved.size() != bias.size())
    throw data_error("checkpoint '" + checkpoint + "': trainer.json's moe_expert_bias has " +
                     std::to_string(saved.size()) + " mixture layers, this model " + std::to_string(bias.size()) +
                     "\n    fix: " + fix);
  return bias;
}

}  // namespace gputrain
