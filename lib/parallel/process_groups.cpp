#include "parallel/process_groups.h"

#include <fmt/format.h>

namespace gputrain {

ProcessGroups::ProcessGroups(const World& world, const ParallelSettings& p, torch::Device device)
    : world_(world), grid_(p, world.size), coord_(grid_.coord(world.rank)) {
  if (!world.distributed() && !world.launched()) return;
  world_comm_ = std::make_unique<Communicator>(world, p.backend, device, p.timeout_s);
  Communicator& all = *world_comm_;
  // Every rank makes its groups in the same order: tp, cp, pp, the pipeline's ends, dp, ep, expert replicas.
  if (grid_.tp() > 1)
    tp_ = all.subgroup(grid_.tp_group(world.rank), fmt::format("tp(dp{},cp{},pp{})", coord_.dp, coord_.cp, coord_.pp));
  if (grid_.cp() > 1)
    cp_ = all.subgroup(grid_.cp_group(world.rank), fmt::format("cp(dp{},tp{},pp{})", coord_.dp, coord_.tp, coord_.pp));
  if (grid_.pp() > 1) {
    const std::vector<int> stages = grid_.pp_group(world.rank);
    pp_ = all.subgroup(stages, fmt::format("pp(dp{},cp{},tp{})", coord_.dp, coord_.cp, coord_.tp));
    if (coord_.pp == 0 || coord_.pp == grid_.pp() - 1)
      ends_ = all.subgroup({stages.front(), stages.back()},
                           fmt::format("ends(dp{},cp{},tp{})", coord_.dp, coord_.cp, coord_.tp));
  }
  if (grid_.replicas() == world.size) {
    dp_ = world_comm_.get();
  } else if (grid_.replicas() > 1) {
    dp_own_ = all.subgroup(grid_.dp_group(world.rank), fmt::format("dp(tp{},pp{})", coord_.tp, coord_.pp));
    dp_ = dp_own_.get();
  }
  if (grid_.ep() > 1) {
    const int run = coord_.dp / grid_.ep(), place = coord_.dp % grid_.ep();
    ep_ = all.subgroup(grid_.ep_group(world.rank),
                       fmt::format("ep(cp{},tp{},pp{},run{})", coord_.cp, coord_.tp, coord_.pp, run));
    if (grid_.replicas() > grid_.ep())
      expert_replicas_ = all.subgroup(grid_.expert_replica_group(world.rank),
                                      fmt::format("experts(tp{},pp{},place{})", coord_.tp, coord_.pp, place));
  }
}

ProcessGroups::~ProcessGroups() = default;

std::vector<double> ProcessGroups::sum_over_world(std::vector<double> values, const std::string& what) const {
  if (!distributed()) return values;
  torch::Tensor t = torch::tensor(values, torch::TensorOptions().dtype(torch::kDouble));
  world_comm_->all_reduce_sum_now(t, what);
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

bool ProcessGroups::any_rank(bool flag, const std::string& what) const {
  if (!distributed()) return flag;
  auto t = torch::tensor({flag ? 1 : 0}, torch::TensorOptions().dtype(torch::kInt));
  world_comm_->all_reduce_sum_now(t, what);
  return t.item<int>() > 0;
}

}  // namespace gputrain
