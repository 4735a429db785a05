#include "checkpoint/tensor_parallel_state.h"

#include <map>

#include "util/error.h"

namespace gputrain {
namespace {

const TensorShard* split_of(const std::vector<TensorShard>& split, const std::string& name) {
  for (const auto& s : split)
    if (s.name == name && s.dim >= 0) return &s;
  return nullptr;
}

}  // namespace

std::vector<NamedTensor> reshard_tp_state(const std::vector<std::vector<NamedTensor>>& saved,
                                          const std::vector<TensorShard>& saved_split,
                                          const std::vector<NamedTensor>& whole_model,
                                          const std::vector<TensorShard>& split, int rank, int size,
                                          const std::string& checkpoint) {
  std::map<std::string, torch::Tensor> weights;
  for (const auto& w : whole_model) weights[w.name] = w.tensor;
  std::vector<std::map<std::string, torch::Tensor>> by_rank(saved.size());
  for (size_t r = 0; r < saved.size(); ++r)
    for (const auto& e : saved[r]) by_rank[r][e.name] = e.tensor;
  std::vector<NamedTensor> out;
  for (const auto& first : saved.front()) {
    const std::string param = first.name.substr(0, first.name.rfind('.'));
    const auto w = weights.find(param);
    std::vector<torch::Tensor> parts;
    for (size_t r = 0; r < saved.size(); ++r) {
      const auto it = by_rank[r].find(first.name);
      if (it == by_rank[r].end())
        throw data_error("checkpoint '" + checkpoint + "': tp rank " + std::to_string(r) + " has no '" + first.name +
                         "'\n    fix: resume from another checkpoint");
      parts.push_back(it->second);
    }
    torch::Tensor whole;
    const TensorShard* before = split_of(saved_split, param);
    if (before && w != weights.end() && first.tensor.sizes() != w->second.sizes() &&
        first.tensor.dim() == w->second.dim()) {
      whole = unshard(parts, *before);  // shaped as the parameter's shard: split as it is
      if (whole.sizes() != w->second.sizes()) whole = torch::Tensor();
    } else {
      bool same = true;  // a step counter, or the state of a parameter every tp rank holds whole
      for (const auto& p : parts) same = same && p.sizes() == first.tensor.sizes() && torch::equal(p, first.tensor);
      if (same) whole = first.tensor;
    }
    if (!whole.defined())
      throw data_error("checkpoint '" + checkpoint + "': the optimizer state '" + first.name +
                       "' differs between its tp ranks and is not shaped as its parameter's shard, so it cannot be "
                       "split for another parallel.tp\n    fix: resume with the checkpoint's parallel.tp (" +
                       std::to_string(saved.size()) + "), or use optim.name: adamw, lion or sgd");
    const TensorShard* now = split_of(split, param);
    if (now && w != weights.end() && whole.sizes() == w->second.sizes()) whole = shard_of(whole, *now, rank, size);
    out.push_back({first.name, whole});
  }
  return out;
}

}  // namespace gputrain
