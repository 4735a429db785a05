#include "parallel/replica_sums.h"

#include <algorithm>

namespace gputrain {

std::vector<int64_t> global_counts(const ProcessGroups& groups, std::vector<int64_t> local) {
  if (!groups.distributed()) return local;
  // The tp and cp ranks and pipeline stages of a replica read the same batch: its first one counts it.
  const GridCoord& at = groups.coord();
  if (at.tp != 0 || at.cp != 0 || at.pp != 0) std::fill(local.begin(), local.end(), 0);
  torch::Tensor t = torch::tensor(local, torch::TensorOptions().dtype(torch::kLong));
  groups.world_comm()->all_reduce_sum_now(t, "sum of the step's counts");
  return {t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel()};
}

torch::Tensor global_sums(const ProcessGroups& groups, torch::Tensor local) {
  if (!groups.distributed()) return local;
  const GridCoord& at = groups.coord();
  // One rank of each replica counts: tp 0, cp 0 and the last pipeline stage (where the loss is).
  const bool counts = at.tp == 0 && at.cp == 0 && at.pp == groups.grid().pp() - 1;
  torch::Tensor t = counts ? local.clone() : torch::zeros_like(local);
  groups.world_comm()->all_reduce_sum_now(t, "sum of the step's objective metrics");
  return t;
}

int64_t global_targets(const ProcessGroups& groups, int64_t local_targets) {
  return global_counts(groups, {local_targets})[0];
}

std::pair<torch::Tensor, bool> sum_loss_and_any(const ProcessGroups& groups, const torch::Tensor& loss, bool flag,
                                                bool per_chunk) {
  if (!groups.distributed()) return {loss, flag};
  // Every tp rank of a replica has the same loss: its first one counts it (of each cp chunk, per_chunk).
  const bool counts = groups.coord().tp == 0 && (per_chunk || groups.coord().cp == 0);
  const torch::Tensor mine = counts ? loss.detach().reshape({}) : torch::zeros({}, loss.options());
  torch::Tensor both = torch::stack({mine, torch::full({}, flag ? 1.0 : 0.0, loss.options())});
  groups.world_comm()->all_reduce_sum_now(both, "sum of the step's loss and stop flags");
  return {both[0].clone(), both[1].item<double>() > 0};
}

std::vector<RankMemory> memory_per_rank(const ProcessGroups& groups, const RankMemory& mine) {
  const int size = groups.world().size, rank = groups.world().rank;
  // One row per rank, each rank filling its own; the stage is stored plus one (0: none).
  torch::Tensor table = torch::zeros({size, 6}, torch::TensorOptions().dtype(torch::kDouble));
  table[rank][0] = mine.weights_mb;
  table[rank][1] = mine.grads_mb;
  table[rank][2] = mine.optimizer_state_mb;
  table[rank][3] = mine.stage ? static_cast<double>(*mine.stage + 1) : 0.0;
  table[rank][4] = static_cast<double>(mine.micro_batches_held);
  table[rank][5] = mine.activations_mb;
  if (groups.distributed()) groups.world_comm()->all_reduce_sum_now(table, "gathering per-rank memory for the summary");
  std::vector<RankMemory> out;
  for (int r = 0; r < size; ++r) {
    RankMemory m;
    m.weights_mb = table[r][0].item<double>();
    m.grads_mb = table[r][1].item<double>();
    m.optimizer_state_mb = table[r][2].item<double>();
    if (const auto stage = static_cast<int64_t>(table[r][3].item<double>()); stage > 0) {
      m.stage = stage - 1;
      m.micro_batches_held = static_cast<int64_t>(table[r][4].item<double>());
      m.activations_mb = table[r][5].item<double>();
    }
    out.push_back(m);
  }
  return out;
}

}  // namespace gputrain
