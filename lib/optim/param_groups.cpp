#include "optim/param_groups.h"

#include "model/gpt_shapes.h"

namespace gputrain {

bool is_embedding(const std::string& name) {
  auto ends = [&](const std::string& s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  return ends("wte.weight") || ends("wpe.weight");
}

std::vector<ParamGroup> make_param_groups(const torch::nn::Module& model, const OptimSettings& o) {
  ParamGroup decay{"decay", {}, {}, o.weight_decay, 1.0};
  ParamGroup no_decay{"no_decay", {}, {}, 0.0, 1.0};
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    if (!item.value().requires_grad()) continue;
    bool decayed = item.value().dim() >= 2 && (o.decay_embeddings || !is_embedding(item.key()));
    ParamGroup& g = decayed ? decay : no_decay;
    g.names.push_back(item.key());
    g.params.push_back(item.value());
  }
  std::vector<ParamGroup> groups;
  for (auto* g : {&decay, &no_decay})
    if (!g->params.empty()) groups.push_back(std::move(*g));
  return groups;
}

std::vector<ParamGroup> make_param_groups(const torch::nn::Module& model, const OptimSettings& o,
                                          const ModelSettings& m) {
  std::vector<ParamGroup> groups = make_param_groups(model, o);
  const auto fused = fused_matrix_rows(m);
  for (auto& g : groups)
    for (const auto& name : g.names)
      if (const auto it = fused.find(name); it != fused.end()) g.matrix_rows.insert(*it);
  return groups;
}

}  // namespace gputrain
