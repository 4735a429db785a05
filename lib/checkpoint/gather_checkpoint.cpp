#include "checkpoint/gather_checkpoint.h"

#include <set>
#include <string>

#include "optim/optimizer.h"
#include "parallel/expert_parallel.h"
#include "parallel/fully_sharded.h"
#include "parallel/tensor_transfer.h"

namespace gputrain {

CheckpointShards gather_checkpoint(ParallelRun& par, const Optimizer& optimizer) {
  const World& world = par.groups().world();
  const Grid& grid = par.groups().grid();
  const bool zero = par.shards_optimizer_state();
  std::vector<NamedTensor> state;
  for (const auto& e : optimizer.state()) state.push_back({e.name, e.tensor});
  CheckpointShards out;
  if (FullyShardedModel* sharded = par.fully_sharded()) {
    // ZeRO-3: every tensor's rows from every rank (each rank takes part in each gather).
    std::vector<NamedTensor> model;
    for (const auto& w : par.weights()) model.push_back({w.name, sharded->whole_of(w.name, w.tensor)});
    for (auto& e : state) e.tensor = sharded->whole_of(e.name.substr(0, e.name.rfind('.')), e.tensor);
    if (world.rank == 0) {
      out.model.push_back(std::move(model));
      out.optimizer.push_back(std::move(state));
    }
    return out;
  }
  // Which ranks hold what rank 0 needs: each (stage, tp shard)'s model from
  // the first dp replica; its optimizer state from there too, or from every
  // dp rank under ZeRO. Under expert parallelism the other ranks of the first
  // ep run send their experts and the experts' state. The parts are joined, so
  // the files do not depend on parallel.pp or ep (the tied embedding and its
  // state, held by two stages alike, are written once).
  auto sends_model = [&](int r) { return grid.coord(r).dp < grid.ep(); };
  auto sends_state = [&](int r) { return zero || grid.coord(r).dp < grid.ep(); };
  if (world.rank != 0) {
    // Past dp rank 0 (which sends the rest), a rank of the first ep run sends its experts' part.
    auto only_experts = [&](std::vector<NamedTensor> v, bool all_owned) {
      if (par.groups().coord().dp > 0 && !all_owned)
        std::erase_if(v, [](const NamedTensor& e) { return !is_expert_parameter(e.name); });
      return v;
    };
    if (sends_model(world.rank))
      send_tensors(*par.groups().world_comm(), only_experts(par.weights(), false), 0, 1,
                   "sending model shards to rank 0 for a checkpoint");
    if (sends_state(world.rank))  // under ZeRO, the state of whatever this rank owns
      send_tensors(*par.groups().world_comm(), only_experts(std::move(state), zero), 0, 4,
                   "sending optimizer state to rank 0 for a checkpoint");
    return out;
  }
  out.model.resize(static_cast<size_t>(grid.tp()));
  out.optimizer.resize(static_cast<size_t>(grid.tp()));
  std::vector<std::set<std::string>> seen_model(out.model.size()), seen_state(out.model.size());
  auto add = [](std::vector<NamedTensor>& into, std::set<std::string>& seen, std::vector<NamedTensor> part) {
    for (auto& e : part)
      if (seen.insert(e.name).second) into.push_back(std::move(e));
  };
  add(out.model[0], seen_model[0], par.weights());
  add(out.optimizer[0], seen_state[0], std::move(state));
  for (int r = 1; r < world.size; ++r) {
    const auto tp = static_cast<size_t>(grid.coord(r).tp);
    if (sends_model(r))
      add(out.model[tp], seen_model[tp],
          receive_tensors(*par.groups().world_comm(), r, 1,
                          "receiving rank " + std::to_string(r) + "'s model shards for a checkpoint"));
    if (sends_state(r))
      add(out.optimizer[tp], seen_state[tp],
          receive_tensors(*par.groups().world_comm(), r, 4,
                          "receiving rank " + std::to_string(r) + "'s optimizer state for a checkpoint"));
  }
  return out;
}

}  // namespace gputrain
