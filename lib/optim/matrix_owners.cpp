#include "optim/matrix_owners.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <stdexcept>

namespace gputrain {

std::vector<int> balance_owners(const std::vector<double>& costs, int ranks) {
  std::vector<size_t> order(costs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return costs[a] > costs[b]; });
  std::vector<double> load(static_cast<size_t>(ranks), 0.0);
  std::vector<int> owner(costs.size(), 0);
  for (size_t i : order) {
    const auto least = std::min_element(load.begin(), load.end()) - load.begin();
    owner[i] = static_cast<int>(least);
    load[static_cast<size_t>(least)] += costs[i];
  }
  return owner;
}

namespace {

// One group's inputs: all-to-all to the owners, compute, all-to-all back; `out[i]` for input `index[i]`.
void compute_in_group(const MatrixGroup& group, const std::vector<const ShardedInput*>& inputs,
                      const std::vector<size_t>& index, at::ScalarType result_dtype, const OwnerCompute& compute,
                      std::vector<torch::Tensor>& out) {
  const int size = group.size, me = group.rank;
  std::vector<double> costs;
  for (const ShardedInput* in : inputs) {  // the iteration's products: rows x cols x min(rows, cols)
    const auto& w = in->shards->whole_sizes;
    costs.push_back(static_cast<double>(w[0]) * static_cast<double>(w[1]) * static_cast<double>(std::min(w[0], w[1])));
  }
  const std::vector<int> owner = balance_owners(costs, size);
  const at::TensorOptions sent = inputs.front()->value.options();
  std::vector<torch::Tensor> sends(static_cast<size_t>(size));
  std::vector<int64_t> receive(static_cast<size_t>(size), 0);
  for (int r = 0; r < size; ++r) {
    std::vector<torch::Tensor> parts;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (owner[i] == r) parts.push_back(inputs[i]->value.reshape(-1));
    sends[static_cast<size_t>(r)] = parts.empty() ? at::empty({0}, sent) : at::cat(parts);
  }
  std::vector<size_t> mine;  // the inputs this rank owns
  for (size_t i = 0; i < inputs.size(); ++i)
    if (owner[i] == me) mine.push_back(i);
  for (size_t i : mine)
    for (int r = 0; r < size; ++r) receive[static_cast<size_t>(r)] += inputs[i]->value.numel();
  const std::vector<torch::Tensor> arrived = group.exchange(sends, receive);

  std::vector<torch::Tensor> wholes;
  std::vector<size_t> which;
  std::vector<int64_t> offset(static_cast<size_t>(size), 0);
  for (size_t i : mine) {
    which.push_back(index[i]);
    std::vector<torch::Tensor> shards;
    const torch::Tensor& like = inputs[i]->value;
    for (int r = 0; r < size; ++r) {
      shards.push_back(
          arrived[static_cast<size_t>(r)].narrow(0, offset[static_cast<size_t>(r)], like.numel()).view(like.sizes()));
      offset[static_cast<size_t>(r)] += like.numel();
    }
    wholes.push_back(inputs[i]->shards->join(shards));
    if (wholes.back().sizes() != at::IntArrayRef(inputs[i]->shards->whole_sizes))
      throw std::logic_error("compute_on_owners: a matrix's shards joined to another shape than its whole");
  }
  const std::vector<torch::Tensor> results = wholes.empty() ? std::vector<torch::Tensor>{} : compute(which, wholes);

  std::vector<torch::Tensor> back(static_cast<size_t>(size));
  std::fill(receive.begin(), receive.end(), 0);
  for (int r = 0; r < size; ++r) {
    std::vector<torch::Tensor> parts;
    for (size_t j = 0; j < mine.size(); ++j)
      parts.push_back(inputs[mine[j]]->shards->cut(results[j].to(result_dtype), r).reshape(-1));
    back[static_cast<size_t>(r)] = parts.empty() ? at::empty({0}, sent.dtype(result_dtype)) : at::cat(parts);
  }
  for (size_t i = 0; i < inputs.size(); ++i) receive[static_cast<size_t>(owner[i])] += inputs[i]->value.numel();
  const std::vector<torch::Tensor> returned = group.exchange(back, receive);
  std::fill(offset.begin(), offset.end(), 0);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto o = static_cast<size_t>(owner[i]);
    const torch::Tensor& like = inputs[i]->value;
    out[index[i]] = returned[o].narrow(0, offset[o], like.numel()).view(like.sizes());
    offset[o] += like.numel();
  }
}

}  // namespace

std::vector<torch::Tensor> compute_on_owners(const MatrixSharding& sharding, const std::vector<ShardedInput>& inputs,
                                             at::ScalarType result_dtype, const OwnerCompute& compute) {
  std::map<int, std::pair<std::vector<const ShardedInput*>, std::vector<size_t>>> by_group;
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto& [members, index] = by_group[inputs[i].shards->group];
    members.push_back(&inputs[i]);
    index.push_back(i);
  }
  std::vector<torch::Tensor> out(inputs.size());
  for (const auto& [group, members] : by_group)
    compute_in_group(sharding.groups.at(static_cast<size_t>(group)), members.first, members.second, result_dtype,
                     compute, out);
  return out;
}

}  // namespace gputrain
