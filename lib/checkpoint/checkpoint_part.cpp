#include "checkpoint/checkpoint_part.h"

#include <functional>
#include <utility>

#include "parallel/expert_parallel.h"
#include "parallel/fully_sharded.h"

namespace gputrain {
namespace {

// Each entry's own part (those holding none are left out): ZeRO-3's shards without their padding,
// recorded in `rows` or `blocks` by how the entry follows its parameter (`layout_of`: the
// parameter and the layout, kWhole for an entry every rank holds whole).
void keep_own_parts(const FullyShardedModel& sharded, std::vector<NamedTensor>& entries,
                    std::map<std::string, RowSlice>& rows, std::map<std::string, RowSlice>* blocks,
                    const std::function<std::pair<std::string, StateLayout>(const std::string&)>& layout_of) {
  std::vector<NamedTensor> kept;
  for (auto& e : entries) {
    const auto [parameter, layout] = layout_of(e.name);
    const auto piece = sharded.own_rows(parameter, e.tensor, layout);
    if (!piece) {
      kept.push_back(std::move(e));  // a step counter, column statistics: every rank holds them whole
    } else if (piece->rows.size(0) > 0) {
      (layout == StateLayout::kBlocks ? *blocks : rows)[e.name] = piece->slice;
      kept.push_back({e.name, piece->rows});
    }
  }
  entries = std::move(kept);
}

}  // namespace

CheckpointPart checkpoint_part(const ProcessGroups& groups, const RankShare& share, bool zero_state,
                               const Optimizer& optimizer) {
  const Grid& grid = groups.grid();
  const GridCoord& at = groups.coord();
  CheckpointPart out;
  out.rank = groups.world().rank;
  out.tp_rank = at.tp;
  out.tp_size = grid.tp();
  std::vector<NamedTensor> state;
  for (const auto& e : optimizer.state()) state.push_back({e.name, e.tensor});
  if (const FullyShardedModel* sharded = share.fully_sharded.get()) {
    // The last stage's copy of a tied embedding is the first stage's: written once, by the first.
    auto counted = [&](std::vector<NamedTensor> v, bool state_names) {
      std::erase_if(v, [&](const NamedTensor& e) {
        return !share.stage_counts(state_names ? e.name.substr(0, e.name.rfind('.')) : e.name);
      });
      return v;
    };
    out.model = counted(share.weights, false);
    out.optimizer = counted(std::move(state), true);
    const std::map<std::string, StateLayout> layouts = optimizer.state_following_parameters();
    keep_own_parts(*sharded, out.model, out.model_rows, nullptr,
                   [](const std::string& name) { return std::pair(name, StateLayout::kRows); });
    keep_own_parts(*sharded, out.optimizer, out.optimizer_rows, &out.optimizer_blocks, [&](const std::string& name) {
      const auto it = layouts.find(name);
      return it == layouts.end() ? std::pair(std::string(), StateLayout::kWhole)
                                 : std::pair(name.substr(0, name.rfind('.')), it->second);
    });
    return out;
  }
  // Past dp rank 0, a rank of the first ep run writes its experts' part (and, under ZeRO, the state of
  // whatever it owns). The cp ranks of a replica hold the same weights: its first writes them.
  const bool first_ep_run = at.dp < grid.ep() && at.cp == 0;
  auto only_experts = [&](std::vector<NamedTensor> v) {
    if (at.dp > 0) std::erase_if(v, [](const NamedTensor& e) { return !is_expert_parameter(e.name); });
    return v;
  };
  if (first_ep_run) out.model = only_experts(share.weights);
  if (zero_state) out.optimizer = std::move(state);
  else if (first_ep_run) out.optimizer = only_experts(std::move(state));
  return out;
}

}  // namespace gputrain
