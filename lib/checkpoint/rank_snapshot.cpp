#include "checkpoint/rank_snapshot.h"

#include <set>

#include "checkpoint/module_weights.h"
#include "checkpoint/tensor_parallel_state.h"
#include "parallel/fully_sharded.h"
#include "util/error.h"

namespace gputrain {

void load_rank_weights(Gpt& model, const ProcessGroups& groups, const RankShare& share,
                       const std::vector<NamedTensor>& whole, const std::string& source, const std::string& fix,
                       const std::function<bool(const std::string&)>& covers) {
  std::set<std::string> in_model, held;
  for (const auto& item : model->named_parameters()) in_model.insert(item.key());
  for (const auto& w : share.weights) held.insert(w.name);  // ZeRO-3: its shards' names
  std::map<std::string, const TensorShard*> split;
  for (const auto& s : share.tensor_split)
    if (s.dim >= 0) split[s.name] = &s;
  const int tp_rank = groups.coord().tp, tp = groups.grid().tp();
  auto wanted = [&](const std::string& name) { return held.count(name) && (!covers || covers(name)); };
  std::vector<NamedTensor> mine;
  for (const auto& w : whole) {
    // Another stage's or another rank's experts: left out. A name foreign to the model goes on to be refused.
    if (in_model.count(w.name) && !wanted(w.name)) continue;
    const auto s = split.find(w.name);
    const bool cut = s != split.end() && w.tensor.dim() > s->second->dim;
    mine.push_back({w.name, cut ? shard_of(w.tensor, *s->second, tp_rank, tp) : w.tensor});
  }
  FullyShardedModel* sharded = share.fully_sharded.get();
  if (!sharded) return load_module_weights(*model, mine, source, fix, wanted);
  std::set<std::string> given;
  for (const auto& w : mine) given.insert(w.name);
  for (const auto& name : held)
    if (wanted(name) && !given.count(name)) throw data_error(source + ": no weights for " + name + "\n    fix: " + fix);
  sharded->load_whole(mine);
}

bool reshards_over_tp(const TrainingSnapshot& snap, const ProcessGroups& groups) {
  const size_t saved = snap.optimizer_shards.empty() ? 1 : snap.optimizer_shards.size();
  return saved != static_cast<size_t>(groups.grid().tp());
}

std::map<std::string, torch::Tensor> rank_optimizer_state(const TrainingSnapshot& snap, const ProcessGroups& groups,
                                                          const GradientReducer& gradients, const RankShare& share,
                                                          const Optimizer& optimizer, const std::string& checkpoint) {
  const int tp = groups.grid().tp(), tp_rank = groups.coord().tp;
  const auto saved = snap.optimizer_shards.empty() ? std::vector<std::vector<NamedTensor>>{snap.optimizer_state}
                                                   : snap.optimizer_shards;
  std::map<std::string, torch::Tensor> state;
  for (const auto& e : !reshards_over_tp(snap, groups) ? saved.at(static_cast<size_t>(tp_rank))
                                                       : reshard_tp_state(saved, snap.tp_split, snap.model,
                                                                          share.tensor_split, tp_rank, tp, checkpoint))
    state[e.name] = e.tensor;
  return gradients.owned_state(std::move(state), optimizer);
}

}  // namespace gputrain
