#include "model/hf_mapping.h"

#include <ATen/ATen.h>

#include <cmath>

#include "model/architecture.h"
#include "util/error.h"
#include "util/tensor_text.h"

namespace gputrain {
namespace {

bool is_vocab_matrix(const std::string& name) { return name == "transformer.wte.weight" || name == "lm_head.weight"; }

}  // namespace

torch::Tensor exported_tensor(const std::string& name, const torch::Tensor& t, const ModelSettings& m) {
  torch::Tensor w = t.detach().to(torch::kCPU, torch::kFloat);
  if (is_vocab_matrix(name)) w = w.narrow(0, 0, m.vocab_size);
  return w.contiguous();
}

std::vector<NamedTensor> fit_to_model(std::map<std::string, torch::Tensor> given,
                                      const std::vector<NamedTensor>& current, const ModelSettings& m,
                                      const std::string& source, const std::string& family,
                                      const std::string& fix_shapes) {
  std::vector<NamedTensor> out;
  for (const auto& [name, own] : current) {
    auto it = given.find(name);
    if (it == given.end())
      throw data_error(source + ": has no weights for " + name + " (is it a " + family + " checkpoint?)" + fix_shapes);
    const torch::Tensor w = it->second.to(torch::kFloat);
    torch::Tensor result;
    if (is_vocab_matrix(name) || name == "transformer.wpe.weight") {
      // Fewer rows than ours (padded vocabulary) keep our rows beyond them;
      // more positions than model.seq_len are cut (a shorter context).
      const bool positions = name == "transformer.wpe.weight";
      const bool fits = w.dim() == 2 && w.size(1) == own.size(1) &&
                        (positions ? w.size(0) >= own.size(0) : w.size(0) == m.vocab_size || w.size(0) == own.size(0));
      if (!fits)
        throw data_error(source + ": " + name + " is " + shape_str(w) + ", which does not fit " + shape_str(own) +
                         (positions ? " (model.seq_len positions)" : " (model.vocab_size rows)") + fix_shapes);
      result = own.detach().to(torch::kCPU, torch::kFloat).clone();
      const int64_t rows = std::min(w.size(0), own.size(0));
      result.narrow(0, 0, rows).copy_(w.narrow(0, 0, rows));
    } else {
      if (w.sizes() != own.sizes())
        throw data_error(source + ": " + name + " is " + shape_str(w) + " there but " + shape_str(own) +
                         " in this model" + fix_shapes);
      result = w;
    }
    given.erase(it);
    out.push_back({name, result});
  }
  if (!given.empty()) {
    std::string extra;
    for (const auto& [name, _] : given) extra += (extra.empty() ? "" : ", ") + name;
    throw data_error(source + ": has weights this model does not: " + extra + fix_shapes);
  }
  return out;
}

void check_config_model_type(const nlohmann::json& config, const ModelSettings& m, const std::string& source) {
  if (!config.contains("model_type") || !config["model_type"].is_string()) return;
  const std::string type = config["model_type"];
  const Architecture& ours = architecture(m);
  if (type == ours.hf.model_type) return;
  std::string readable;
  for (const Architecture* a : architectures())
    readable += std::string(readable.empty() ? "" : " or ") + a->hf.family + " (model.arch: " + a->name + ")";
  const Architecture* theirs = architecture_of_hf_model_type(type);
  throw data_error(source + ": config.json is a " + type + " model, but model.arch " + ours.name + " reads " +
                   ours.hf.model_type + " checkpoints" +
                   (theirs ? "\n    fix: set model.arch: " + std::string(theirs->name)
                           : "\n    fix: init from a " + readable + " checkpoint"));
}

void check_config_int(const nlohmann::json& config, const char* key, const char* recipe_key, int64_t ours,
                      const std::string& source) {
  if (config.contains(key) && config[key].is_number_integer() && config[key].get<int64_t>() != ours)
    throw data_error(source + ": config.json has " + key + " " + config[key].dump() + " but " + recipe_key + " is " +
                     std::to_string(ours) + "\n    fix: set " + recipe_key + ": " + config[key].dump());
}

void check_config_bool(const nlohmann::json& config, const char* key, const char* recipe_key, bool ours,
                       const std::string& source) {
  if (config.contains(key) && config[key].is_boolean() && config[key].get<bool>() != ours)
    throw data_error(source + ": config.json has " + key + " " + config[key].dump() + " but " + recipe_key + " is " +
                     (ours ? "true" : "false") + "\n    fix: set " + recipe_key + ": " + config[key].dump());
}

void check_config_float(const nlohmann::json& config, const char* key, const char* recipe_key, double ours,
                        const std::string& source) {
  if (!config.contains(key) || !config[key].is_number()) return;
  const double theirs = config[key].get<double>();
  if (std::fabs(theirs - ours) > 1e-9 * std::max(std::fabs(theirs), std::fabs(ours)))
    throw data_error(source + ": config.json has " + key + " " + config[key].dump() + " but " + recipe_key + " is " +
                     nlohmann::json(ours).dump() + "\n    fix: set " + recipe_key + ": " + config[key].dump());
}

nlohmann::ordered_json gpt2_eot_id(const ModelSettings& m) {
  return m.vocab_size > 50256 ? nlohmann::ordered_json(50256) : nlohmann::ordered_json(nullptr);
}

}  // namespace gputrain
