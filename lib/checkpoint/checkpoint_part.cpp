#include "checkpoint/checkpoint_part.h"

#include <functional>
#include <set>

#include "parallel/expert_parallel.h"
#include "parallel/fully_sharded.h"

namespace gputrain {
namespace {

// Each entry's own rows (those holding none are left out): ZeRO-3's shards without their padding.
// `parameter_of` names the parameter whose rows an entry follows, or "" (every rank holds it whole).
void keep_own_rows(const FullyShardedModel& sharded, std::vector<NamedTensor>& entries,
                   std::map<std::string, RowSlice>& rows,
                   const std::function<std::string(const std::string&)>& parameter_of) {
  std::vector<NamedTensor> kept;
  for (auto& e : entries) {
    const std::string parameter = parameter_of(e.name);
    const auto piece = parameter.empty() ? std::nullopt : sharded.own_rows(parameter, e.tensor);
    if (!piece) {
      kept.push_back(std::move(e));  // a step counter, column statistics: every rank holds them whole
    } else if (piece->rows.size(0) > 0) {
      rows[e.name] = piece->slice;
      kept.push_back({e.name, piece->rows});
    }
  }
  entries = std::move(kept);
}

}  // namespace

CheckpointPart checkpoint_part(const ParallelRun& par, const Optimizer& optimizer) {
  const Grid& grid = par.groups().grid();
  const GridCoord& at = par.groups().coord();
  CheckpointPart out;
  out.rank = par.groups().world().rank;
  out.tp_rank = at.tp;
  out.tp_size = grid.tp();
  std::vector<NamedTensor> state;
  for (const auto& e : optimizer.state()) state.push_back({e.name, e.tensor});
  if (const FullyShardedModel* sharded = par.fully_sharded()) {
    out.model = par.weights();
    out.optimizer = std::move(state);
    const std::set<std::string> follows_rows = optimizer.state_following_rows();
    keep_own_rows(*sharded, out.model, out.model_rows, [](const std::string& name) { return name; });
    keep_own_rows(*sharded, out.optimizer, out.optimizer_rows, [&](const std::string& name) {
      return follows_rows.count(name) ? name.substr(0, name.rfind('.')) : std::string();
    });
    return out;
  }
  // Past dp rank 0, a rank of the first ep run writes its experts' part (and, under ZeRO, the state of
  // whatever it owns).
  const bool zero = par.shards_optimizer_state();
  const bool first_ep_run = at.dp < grid.ep();
  auto only_experts = [&](std::vector<NamedTensor> v) {
    if (at.dp > 0) std::erase_if(v, [](const NamedTensor& e) { return !is_expert_parameter(e.name); });
    return v;
  };
  if (first_ep_run) out.model = only_experts(par.weights());
  if (zero) out.optimizer = std::move(state);
  else if (first_ep_run) out.optimizer = only_experts(std::move(state));
  return out;
}

}  // namespace gputrain
