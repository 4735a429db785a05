#include "parallel/gradient_reducer.h"

#include <fmt/format.h>

#include "optim/grad_clip.h"
#include "optim/optimizer.h"
#include "parallel/expert_parallel.h"
#include "parallel/fully_sharded.h"
#include "parallel/pipeline.h"

namespace gputrain {

GradientReducer::GradientReducer(const ProcessGroups& groups, const ParallelSettings& p, RankShare share)
    : groups_(groups), zero_(p.zero), bucket_mb_(p.bucket_mb), share_(std::move(share)) {
  // Frozen parameters (LoRA's base) have no gradients to reduce, clip or own.
  std::vector<NamedTensor> trainable;
  for (const auto& w : share_.weights)
    if (w.tensor.requires_grad()) trainable.push_back(w);
  params_ = in_gradient_order(trainable);
  sharded_.assign(params_.size(), 0);
  expert_.assign(params_.size(), 0);
  for (size_t i = 0; i < params_.size(); ++i) {
    const HeldParameter& h = held(params_[i].name);
    sharded_[i] = h.split.dim >= 0;
    expert_[i] = h.expert;
  }
  if (share_.layout.holds_part())
    for (const HeldParameter& h : share_.layout.parameters) held_.insert(h.name);
  if (share_.fully_sharded || !groups_.dp()) return;  // ZeRO-3's shards reduce their own gradients
  // Dense parameters are replicated over the dp group; experts split by ep over their replicas.
  std::vector<NamedTensor> dense_named, expert_named;
  for (const auto& w : share_.weights) (held(w.name).expert ? expert_named : dense_named).push_back(w);
  for (size_t i = 0; i < params_.size(); ++i) (expert_[i] ? experts_ : dense_).params.push_back(params_[i]);
  dense_.group = groups_.dp();
  experts_.group = groups_.expert_replicas();
  replicate(dense_, dense_named);
  replicate(experts_, expert_named);
}

GradientReducer::~GradientReducer() = default;

const HeldParameter& GradientReducer::held(const std::string& name) const {
  const HeldParameter* h = share_.layout.find(name);
  if (!h) throw std::logic_error("GradientReducer: " + name + " is not in this rank's layout");
  return *h;
}

void GradientReducer::replicate(Replicas& r, const std::vector<NamedTensor>& named) {
  if (!r.group) {  // the only holder: nothing to reduce or share, and under ZeRO it updates them all
    if (zero_ > 0)
      for (const auto& p : r.params) owned_.insert(p.name);
    return;
  }
  // Every rank built the same weights from the seed (and init_from), but a
  // replica that differs would silently train another model: the group's rank 0 decides.
  broadcast_parameters(*r.group, named);
  if (r.params.empty()) return;  // all frozen (LoRA's base)
  if (zero_ > 0) {               // the layout's owners (its replica index is this rank's in r.group)
    for (const auto& p : r.params) {
      const HeldParameter& h = held(p.name);
      r.owners.push_back(h.owner);
      if (share_.layout.owns(h)) owned_.insert(p.name);
    }
  }
  r.sync = std::make_unique<GradientSync>(*r.group, r.params, bucket_mb_, zero_ == 2 ? r.owners : std::vector<int>{});
}

std::function<void(bool)> GradientReducer::backward_hook() {
  if (!dense_.sync && !experts_.sync) return {};
  return [this](bool last) {
    for (Replicas* r : {&dense_, &experts_})
      if (r->sync) r->sync->prepare_backward(last);
  };
}

void GradientReducer::finish() {
  if (share_.fully_sharded) share_.fully_sharded->finish_backward();
  for (Replicas* r : {&dense_, &experts_})
    if (r->sync) r->sync->finish();
  // After the dp reduction: both copies of the tied embedding then hold the
  // whole gradient (embedding + head, every replica's) and take the same update.
  if (groups_.pipeline_ends() && share_.tied_weight.defined())
    sum_tied_embedding_grads(share_.tied_weight, *groups_.pipeline_ends());
  grad_bytes_ = 0;
  for (const auto& p : params_)
    if (p.tensor.grad().defined()) grad_bytes_ += static_cast<int64_t>(p.tensor.grad().nbytes());
}

bool GradientReducer::overflow_on_any_rank(bool local_overflow) {
  if (!groups_.distributed() || !ranks_differ()) return local_overflow;
  return groups_.any_rank(local_overflow, "agreement on an fp16 overflow");
}

torch::Tensor GradientReducer::clip_grad_norm(double max_norm, torch::Tensor* fold) {
  std::vector<torch::Tensor> all;
  for (const auto& p : params_) all.push_back(p.tensor);
  if (!groups_.distributed() || !ranks_differ()) return gputrain::clip_grad_norm(all, max_norm, fold);
  // One world all-reduce of the squared norm. A value is counted by one rank:
  // each pipeline stage its own parameters (the tied embedding on the first
  // stage), split parameters by every tp rank (each holds its own slice),
  // replicated ones by tp rank 0; ZeRO-2 and 3 spread the gradients over the
  // replicas (each rank holds its own parameters'), otherwise dp rank 0 (its cp
  // rank 0) speaks for the replicas, and for experts each rank of the first ep run
  // for its own.
  const GridCoord& at = groups_.coord();
  std::vector<torch::Tensor> counted;
  for (size_t i = 0; i < params_.size(); ++i) {
    const bool replica_speaks = zero_ >= 2 || (at.cp == 0 && (expert_[i] ? at.dp < groups_.grid().ep() : at.dp == 0));
    if (replica_speaks && (sharded_[i] || at.tp == 0) && share_.stage_counts(params_[i].name))
      counted.push_back(params_[i].tensor);
  }
  torch::Tensor squared = squared_grad_norm(counted, params_.front().tensor.options());
  groups_.world_comm()->all_reduce_sum_now(squared, "sum of the gradient norm's shards");
  const torch::Tensor norm = squared.sqrt().reshape({});
  scale_grads_to_norm(all, norm, max_norm, fold);
  return norm;
}

void GradientReducer::after_optimizer_step() {
  if (!zero_active()) return;
  for (Replicas* r : {&dense_, &experts_})
    if (r->sync) broadcast_from_owners(*r->group, r->params, r->owners);
}

std::vector<ParamGroup> GradientReducer::owned_groups(std::vector<ParamGroup> groups) const {
  const FullyShardedModel* sharded = share_.fully_sharded.get();
  std::map<std::string, torch::Tensor> shard;  // ZeRO-3: each parameter this rank holds, as its shard
  if (sharded)
    for (const auto& p : share_.weights) shard[p.name] = p.tensor;
  const std::set<std::string>* mine = updated_names();
  if (!sharded && !mine) return groups;
  std::vector<ParamGroup> out;
  for (auto& g : groups) {
    ParamGroup kept = g;
    kept.names.clear();
    kept.params.clear();
    for (size_t i = 0; i < g.names.size(); ++i) {
      const auto it = shard.find(g.names[i]);
      if (sharded ? it == shard.end() : !mine->count(g.names[i])) continue;
      kept.names.push_back(g.names[i]);
      kept.params.push_back(sharded ? it->second : g.params[i]);
    }
    if (!kept.params.empty()) out.push_back(std::move(kept));
  }
  return out;
}

std::map<std::string, torch::Tensor> GradientReducer::owned_state(std::map<std::string, torch::Tensor> state,
                                                                  const Optimizer& optimizer) const {
  if (const FullyShardedModel* sharded = share_.fully_sharded.get()) {
    std::map<std::string, const StateEntry*> live;
    for (const auto& e : optimizer.state()) live[e.name] = &e;
    std::map<std::string, torch::Tensor> out;
    for (auto& [key, t] : state) {
      const std::string parameter = key.substr(0, key.rfind('.'));
      if (!share_.layout.find(parameter)) continue;  // another pipeline stage's
      const auto e = live.find(key);
      // (Loading names a saved entry this optimizer does not have.)
      out.emplace(key, e == live.end() ? t : sharded->shard_of(parameter, t, e->second->layout, e->second->tensor));
    }
    return out;
  }
  const std::set<std::string>* mine = updated_names();
  if (!mine) return state;
  std::map<std::string, torch::Tensor> out;
  for (auto& [key, t] : state) {
    // State keys are "<parameter name>.<slot>"; slots have no dots.
    const auto dot = key.rfind('.');
    if (dot != std::string::npos && mine->count(key.substr(0, dot))) out.emplace(key, t);
  }
  return out;
}

RankMemory GradientReducer::memory(const Optimizer& optimizer) const {
  const double mib = 1024.0 * 1024.0;
  int64_t weights = 0;
  for (const auto& p : params_) weights += static_cast<int64_t>(p.tensor.nbytes());
  RankMemory m;
  m.weights_mb = static_cast<double>(optimizer.resident_parameter_bytes(weights)) / mib;
  m.grads_mb = static_cast<double>(grad_bytes_) / mib;
  m.optimizer_state_mb = static_cast<double>(optimizer.resident_state_bytes()) / mib;
  return m;
}

std::optional<GradSyncTimes> GradientReducer::sync_times() const {
  if (!dense_.sync) return std::nullopt;
  GradSyncTimes t;
  t.buckets = dense_.sync->bucket_count();
  t.backward_end_s = dense_.sync->last_backward_end_s();
  for (const auto& e : dense_.sync->last_step_events()) t.bucket_start_s.push_back(e.launched_s);
  return t;
}

std::string GradientReducer::describe() const {
  std::string s;
  if (dense_.sync)
    s += fmt::format(
        "; data parallel: {} gradient bucket(s) of up to {:g} MiB, reduced over {} replica(s) during backward",
        dense_.sync->bucket_count(), bucket_mb_, groups_.grid().replicas());
  if (!owns_whole_parameters()) return s;
  int64_t mine = 0, total = 0, mine_tensors = 0;
  for (const auto& p : params_) {
    total += p.tensor.numel();
    if (owned_.count(p.name)) {
      mine += p.tensor.numel();
      ++mine_tensors;
    }
  }
  return s + fmt::format("; ZeRO-{}: this rank updates {} of {} parameter tensors ({:.1f}% of the values){}", zero_,
                         mine_tensors, params_.size(),
                         100.0 * static_cast<double>(mine) / static_cast<double>(std::max<int64_t>(1, total)),
                         zero_ == 2 ? " and keeps only their gradients" : "");
}

}  // namespace gputrain
