#include "optim/matrix_owners.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <deque>
#include <map>
#include <numeric>
#include <stdexcept>

namespace gputrain {

std::vector<int> balance_owners(const std::vector<double>& costs, int ranks) {
  std::vector<double> load(static_cast<size_t>(ranks), 0.0);
  return balance_owners(costs, load);
}

std::vector<int> balance_owners(const std::vector<double>& costs, std::vector<double>& load) {
  std::vector<size_t> order(costs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return costs[a] > costs[b]; });
  std::vector<int> owner(costs.size(), 0);
  for (size_t i : order) {
    const auto least = std::min_element(load.begin(), load.end()) - load.begin();
    owner[i] = static_cast<int>(least);
    load[static_cast<size_t>(least)] += costs[i];
  }
  return owner;
}

// One group's share of the set: its inputs (indices in the set), their owners, what this rank owns.
struct OwnerExchange::Group {
  const MatrixGroup* group = nullptr;
  std::vector<size_t> members;  // indices in inputs_
  std::vector<int> owner;       // per member
  std::vector<size_t> mine;     // positions in members this rank owns
  MatrixGroup::Arrival arrival, returned;
};

OwnerExchange::OwnerExchange(const MatrixSharding& sharding, std::vector<ShardedInput> inputs,
                             at::ScalarType result_dtype, OwnerLoads* loads)
    : inputs_(std::move(inputs)), result_dtype_(result_dtype) {
  std::map<int, size_t> by_group;
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const int g = inputs_[i].shards->group;
    const auto [it, added] = by_group.emplace(g, groups_.size());
    if (added) groups_.push_back(Group{&sharding.groups.at(static_cast<size_t>(g))});
    groups_[it->second].members.push_back(i);
  }
  for (Group& g : groups_) {
    const int size = g.group->size, me = g.group->rank;
    std::vector<double> this_set(static_cast<size_t>(size), 0.0);
    std::vector<double>& load =
        loads
            ? loads->try_emplace(inputs_[g.members.front()].shards->group, static_cast<size_t>(size), 0.0).first->second
            : this_set;
    std::vector<double> costs;
    for (size_t i : g.members) {  // the iteration's products: rows x cols x min(rows, cols)
      const auto& w = inputs_[i].shards->whole_sizes;
      costs.push_back(static_cast<double>(w[0]) * static_cast<double>(w[1]) *
                      static_cast<double>(std::min(w[0], w[1])));
    }
    g.owner = balance_owners(costs, load);
    const at::TensorOptions sent = inputs_[g.members.front()].value.options();
    std::vector<torch::Tensor> sends(static_cast<size_t>(size));
    std::vector<int64_t> receive(static_cast<size_t>(size), 0);
    for (int r = 0; r < size; ++r) {
      std::vector<torch::Tensor> parts;
      for (size_t j = 0; j < g.members.size(); ++j)
        if (g.owner[j] == r) parts.push_back(inputs_[g.members[j]].value.reshape(-1));
      sends[static_cast<size_t>(r)] = parts.empty() ? at::empty({0}, sent) : at::cat(parts);
    }
    for (size_t j = 0; j < g.members.size(); ++j)
      if (g.owner[j] == me) {
        g.mine.push_back(j);
        for (int r = 0; r < size; ++r) receive[static_cast<size_t>(r)] += inputs_[g.members[j]].value.numel();
      }
    g.arrival = g.group->start_exchange(sends, receive);
  }
}

OwnerExchange::~OwnerExchange() = default;
OwnerExchange::OwnerExchange(OwnerExchange&&) noexcept = default;

void OwnerExchange::compute(const OwnerCompute& compute) {
  for (Group& g : groups_) {
    const int size = g.group->size;
    const std::vector<torch::Tensor> arrived = g.arrival();
    g.arrival = nullptr;
    std::vector<torch::Tensor> wholes;
    std::vector<size_t> which;
    std::vector<int64_t> offset(static_cast<size_t>(size), 0);
    for (size_t j : g.mine) {
      const ShardedInput& in = inputs_[g.members[j]];
      which.push_back(g.members[j]);
      std::vector<torch::Tensor> shards;
      for (int r = 0; r < size; ++r) {
        int64_t& from = offset[static_cast<size_t>(r)];
        shards.push_back(arrived[static_cast<size_t>(r)].narrow(0, from, in.value.numel()).view(in.value.sizes()));
        from += in.value.numel();
      }
      wholes.push_back(in.shards->join(shards));
      if (wholes.back().sizes() != at::IntArrayRef(in.shards->whole_sizes))
        throw std::logic_error("OwnerExchange: a matrix's shards joined to another shape than its whole");
    }
    const std::vector<torch::Tensor> results = wholes.empty() ? std::vector<torch::Tensor>{} : compute(which, wholes);

    const at::TensorOptions back_options = inputs_[g.members.front()].value.options().dtype(result_dtype_);
    std::vector<torch::Tensor> back(static_cast<size_t>(size));
    std::vector<int64_t> receive(static_cast<size_t>(size), 0);
    for (int r = 0; r < size; ++r) {
      std::vector<torch::Tensor> parts;
      for (size_t k = 0; k < g.mine.size(); ++k)
        parts.push_back(inputs_[g.members[g.mine[k]]].shards->cut(results[k].to(result_dtype_), r).reshape(-1));
      back[static_cast<size_t>(r)] = parts.empty() ? at::empty({0}, back_options) : at::cat(parts);
    }
    for (size_t j = 0; j < g.members.size(); ++j)
      receive[static_cast<size_t>(g.owner[j])] += inputs_[g.members[j]].value.numel();
    g.returned = g.group->start_exchange(back, receive);
  }
}

std::vector<torch::Tensor> OwnerExchange::finish() {
  std::vector<torch::Tensor> out(inputs_.size());
  for (Group& g : groups_) {
    const std::vector<torch::Tensor> returned = g.returned();
    g.returned = nullptr;
    std::vector<int64_t> offset(static_cast<size_t>(g.group->size), 0);
    for (size_t j = 0; j < g.members.size(); ++j) {
      const auto o = static_cast<size_t>(g.owner[j]);
      const torch::Tensor& like = inputs_[g.members[j]].value;
      out[g.members[j]] = returned[o].narrow(0, offset[o], like.numel()).view(like.sizes());
      offset[o] += like.numel();
    }
  }
  return out;
}

void compute_on_owners_pipelined(const MatrixSharding& sharding, size_t count, at::ScalarType result_dtype,
                                 const SetInputs& start, const SetCompute& compute, const SetFinish& finish) {
  // Set k's exchange starts, then set k-1 is computed (while set k's shards travel), then set k-2
  // finished (its results travelled while set k-1 was computed).
  std::deque<std::pair<size_t, OwnerExchange>> started, computed;
  OwnerLoads loads;
  auto compute_oldest = [&] {
    auto [k, x] = std::move(started.front());
    started.pop_front();
    x.compute([&, k = k](const std::vector<size_t>& which, const std::vector<torch::Tensor>& wholes) {
      return compute(k, which, wholes);
    });
    computed.emplace_back(k, std::move(x));
  };
  auto finish_oldest = [&] {
    auto [k, x] = std::move(computed.front());
    computed.pop_front();
    finish(k, x.finish());
  };
  for (size_t k = 0; k < count; ++k) {
    started.emplace_back(k, OwnerExchange(sharding, start(k), result_dtype, &loads));
    if (started.size() > 1) compute_oldest();
    if (computed.size() > 1) finish_oldest();
  }
  while (!started.empty()) compute_oldest();
  while (!computed.empty()) finish_oldest();
}

}  // namespace gputrain
