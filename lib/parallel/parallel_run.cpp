#include "parallel/parallel_run.h"

#include <fmt/format.h>

#include "optim/grad_clip.h"
#include "optim/optimizer.h"
#include "parallel/expert_parallel.h"
#include "parallel/fully_sharded.h"
#include "parallel/tensor_parallel.h"
#include "util/device.h"
#include "util/error.h"

namespace gputrain {

ParallelRun::ParallelRun(const World& world, const ParallelSettings& p, torch::Device device, ShardBlocks blocks)
    : groups_(world, p, device),
      device_(device),
      zero_(p.zero),
      reshard_after_forward_(p.reshard_after_forward),
      gather_bf16_(p.gather_dtype == GatherDtype::kBf16),
      offload_params_(p.offload_params && device.is_cuda()),
      shard_blocks_(std::move(blocks)),
      bucket_mb_(p.bucket_mb),
      schedule_(p.pp_schedule),
      pp_microbatches_(p.pp_microbatches) {}

ParallelRun::~ParallelRun() = default;

torch::Device ParallelRun::build_device() const { return fully_shards() ? torch::Device(torch::kCPU) : device_; }

std::string ParallelRun::describe() const {
  if (!distributed()) return "1 process";
  int64_t mine = 0, total = 0, mine_tensors = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    total += params_[i].tensor.numel();
    if (!owns_whole_parameters() || owned_.count(params_[i].name)) {
      mine += params_[i].tensor.numel();
      ++mine_tensors;
    }
  }
  std::string s = fmt::format("{} process(es) ({}), {}; grid dp {} x pp {} x tp {}, this rank dp {} pp {} tp {}",
                              groups_.world().size, groups_.world_comm()->backend_name(), groups_.world().describe(),
                              groups_.grid().dp(), groups_.grid().pp(), groups_.grid().tp(), groups_.coord().dp,
                              groups_.coord().pp, groups_.coord().tp);
  if (groups_.tp()) {
    int64_t split = 0;
    for (const auto& t : split_) split += t.dim >= 0 ? 1 : 0;
    s += fmt::format("; tensor parallel: {} of {} parameter tensors split over {} ranks", split, split_.size(),
                     groups_.grid().tp());
  }
  if (groups_.pp())
    s += fmt::format("; pipeline: stage {} of {} runs blocks [{}, {}){}{}, {} schedule", groups_.coord().pp,
                     groups_.grid().pp(), stage_.first, stage_.last, stage_.embeds ? " and the embeddings" : "",
                     stage_.has_head ? " and the head" : "", schedule_ == PipelineSchedule::kGpipe ? "gpipe" : "1f1b");
  if (dense_.sync)
    s += fmt::format(
        "; data parallel: {} gradient bucket(s) of up to {:g} MiB, reduced over {} replica(s) during backward",
        dense_.sync->bucket_count(), bucket_mb_, groups_.grid().dp());
  if (groups_.ep())
    s += fmt::format(
        "; expert parallel: this rank holds experts {}-{} of each mixture layer's {} (ep {}), their "
        "gradients reduced over {} replica(s)",
        first_expert_, first_expert_ + local_experts_ - 1, local_experts_ * groups_.grid().ep(), groups_.grid().ep(),
        groups_.grid().dp() / groups_.grid().ep());
  if (fully_sharded_) {
    const int expert_replicas = groups_.grid().dp() / groups_.grid().ep();
    const std::string share = !groups_.ep() ? fmt::format(" ({:.1f}% of the values)", 100.0 / groups_.dp()->size())
                              : expert_replicas == 1
                                  ? " (its experts whole: no other rank holds them)"
                                  : fmt::format(" (its experts' 1/{}, over their replicas)", expert_replicas);
    s += fmt::format(
        "; ZeRO-3: this rank holds 1/{} of the rows of each of the {} parameter tensors{}, each unit's "
        "weights gathered only while in use{}{}{}",
        groups_.dp()->size(), named_.size(), share, reshard_after_forward_ ? "" : " (kept from forward to backward)",
        gather_bf16_ ? ", in bf16" : "",
        offload_params_ ? "; the shards (pinned), their gradients and the optimizer state in host memory, the "
                          "update on the CPU (parallel.offload_params)"
                        : "");
  } else if (zero_active()) {
    s += fmt::format("; ZeRO-{}: this rank updates {} of {} parameter tensors ({:.1f}% of the values){}", zero_,
                     mine_tensors, params_.size(), 100.0 * static_cast<double>(mine) / std::max<int64_t>(1, total),
                     zero_ == 2 ? " and keeps only their gradients" : "");
  }
  return s;
}

void ParallelRun::split_tensors(Gpt& model) {
  if (groups_.tp()) split_ = parallelize_tensor(model, *groups_.tp());
}

void ParallelRun::keep_pipeline_stage(Gpt& model) {
  stages_ = split_stages(model->cfg, groups_.grid().pp());
  stage_ = stages_[static_cast<size_t>(groups_.coord().pp)];
  if (!groups_.pp()) return;
  for (auto& name : keep_stage(model, stage_)) held_.insert(std::move(name));
  if (model->cfg.tie_embeddings && (stage_.embeds || stage_.has_head)) tied_weight_ = model->transformer->wte->weight;
}

void ParallelRun::keep_experts(Gpt& model) {
  if (!groups_.ep()) return;
  local_experts_ = model->cfg.moe.experts / groups_.ep()->size();
  first_expert_ = groups_.ep()->rank() * local_experts_;
  if (!groups_.pp())
    for (const auto& item : model->named_parameters()) held_.insert(item.key());
  for (const auto& name : parallelize_experts(model, *groups_.ep())) held_.erase(name);
}

std::vector<NamedTensor> ParallelRun::held(std::vector<NamedTensor> named) const {
  if (!holds_part()) return named;
  std::vector<NamedTensor> out;
  for (auto& e : named)
    if (held_.count(e.name)) out.push_back(std::move(e));
  return out;
}

bool ParallelRun::stage_counts(const std::string& name) const {
  return !(tied_weight_.defined() && !stage_.embeds && name == "transformer.wte.weight");
}

void ParallelRun::attach(Gpt& model, const std::vector<NamedTensor>& named_params) {
  // Dense parameters are replicated over the dp group; experts split by ep over their replicas.
  std::vector<NamedTensor> dense_named, expert_named;
  for (const auto& p : named_params) (split_expert(p.name) ? expert_named : dense_named).push_back(p);
  if (fully_shards()) {
    // Rank 0 of each group decides the weights, as replicate() does; then each rank keeps its rows
    // (an expert's shared by its replicas; with none, ep = dp, it stays whole).
    broadcast_parameters(*groups_.dp(), dense_named);
    if (groups_.expert_replicas()) broadcast_parameters(*groups_.expert_replicas(), expert_named);
    ShardPlacement place{device_, offload_params_ ? torch::Device(torch::kCPU) : device_, reshard_after_forward_,
                         gather_bf16_ ? std::optional<torch::ScalarType>(torch::kBFloat16) : std::nullopt,
                         shard_blocks_};
    fully_sharded_ = std::make_shared<FullyShardedModel>(
        *groups_.dp(), model, named_params, place,
        [this](const std::string& name) { return split_expert(name) ? groups_.expert_replicas() : groups_.dp(); });
    model->unit_hooks = fully_sharded_;
    named_ = fully_sharded_->shards();
    // The pipeline's ends sum the tied embedding's gradients shard by shard (the same rows at either end).
    for (const auto& p : named_)
      if (tied_weight_.defined() && p.name == "transformer.wte.weight") tied_weight_ = p.tensor;
  } else {
    named_ = named_params;
  }
  // Frozen parameters (LoRA's base) have no gradients to reduce, clip or own.
  std::vector<NamedTensor> trainable;
  for (const auto& p : named_)
    if (p.tensor.requires_grad()) trainable.push_back(p);
  params_ = in_gradient_order(trainable);
  mark_split_and_experts();
  if (fully_sharded_ || !groups_.dp()) return;
  for (size_t i = 0; i < params_.size(); ++i) (expert_[i] ? experts_ : dense_).params.push_back(params_[i]);
  dense_.group = groups_.dp();
  experts_.group = groups_.expert_replicas();
  replicate(dense_, dense_named);
  replicate(experts_, expert_named);
}

bool ParallelRun::split_expert(const std::string& name) const { return groups_.ep() && is_expert_parameter(name); }

void ParallelRun::mark_split_and_experts() {
  sharded_.assign(params_.size(), 0);
  expert_.assign(params_.size(), 0);
  for (size_t i = 0; i < params_.size(); ++i) {
    for (const auto& t : split_)
      if (t.name == params_[i].name) sharded_[i] = t.dim >= 0;
    expert_[i] = split_expert(params_[i].name);
  }
}

void ParallelRun::replicate(Replicas& r, const std::vector<NamedTensor>& named) {
  if (!r.group) {  // the only holder: nothing to reduce or share, and under ZeRO it updates them all
    if (zero_ > 0)
      for (const auto& p : r.params) owned_.insert(p.name);
    return;
  }
  // Every rank built the same weights from the seed (and init_from), but a
  // replica that differs would silently train another model: the group's rank 0 decides.
  broadcast_parameters(*r.group, named);
  if (r.params.empty()) return;  // all frozen (LoRA's base)
  if (zero_ > 0) {
    std::vector<int64_t> sizes;
    for (const auto& p : r.params) sizes.push_back(p.tensor.numel());
    r.owners = partition_contiguous(sizes, r.group->size());
    for (size_t i = 0; i < r.params.size(); ++i)
      if (r.owners[i] == r.group->rank()) owned_.insert(r.params[i].name);
  }
  r.sync = std::make_unique<GradientSync>(*r.group, r.params, bucket_mb_, zero_ == 2 ? r.owners : std::vector<int>{});
}

std::vector<ParamGroup> ParallelRun::owned_groups(std::vector<ParamGroup> groups) const {
  std::map<std::string, torch::Tensor> shard;  // ZeRO-3: each parameter this rank holds, as its shard
  for (const auto& p : named_)
    if (fully_sharded_) shard[p.name] = p.tensor;
  const std::set<std::string>* mine = updated_names();
  if (!fully_sharded_ && !mine) return groups;
  std::vector<ParamGroup> out;
  for (auto& g : groups) {
    ParamGroup kept = g;
    kept.names.clear();
    kept.params.clear();
    for (size_t i = 0; i < g.names.size(); ++i) {
      const auto it = shard.find(g.names[i]);
      if (fully_sharded_ ? it == shard.end() : !mine->count(g.names[i])) continue;
      kept.names.push_back(g.names[i]);
      kept.params.push_back(fully_sharded_ ? it->second : g.params[i]);
    }
    if (!kept.params.empty()) out.push_back(std::move(kept));
  }
  return out;
}

std::map<std::string, torch::Tensor> ParallelRun::owned_state(std::map<std::string, torch::Tensor> state,
                                                              const Optimizer& optimizer) const {
  if (fully_sharded_) {
    std::map<std::string, const StateEntry*> live;
    for (const auto& e : optimizer.state()) live[e.name] = &e;
    std::map<std::string, torch::Tensor> out;
    for (auto& [key, t] : state) {
      const std::string parameter = key.substr(0, key.rfind('.'));
      if (holds_part() && !held_.count(parameter)) continue;  // another pipeline stage's
      const auto e = live.find(key);
      // (Loading names a saved entry this optimizer does not have.)
      out.emplace(key,
                  e == live.end() ? t : fully_sharded_->shard_of(parameter, t, e->second->layout, e->second->tensor));
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

int64_t ParallelRun::global_targets(int64_t local_targets) {
  if (!distributed()) return local_targets;
  // The tp ranks and pipeline stages of a replica read the same batch: its first one counts it.
  auto t = torch::tensor({groups_.coord().tp == 0 && groups_.coord().pp == 0 ? local_targets : 0},
                         torch::TensorOptions().dtype(torch::kLong));
  groups_.world_comm()->all_reduce_sum_now(t, "sum of the step's target tokens");
  return t.item<int64_t>();
}

std::function<void(bool)> ParallelRun::backward_hook() {
  if (!dense_.sync && !experts_.sync) return {};
  return [this](bool last) {
    for (Replicas* r : {&dense_, &experts_})
      if (r->sync) r->sync->prepare_backward(last);
  };
}

int64_t ParallelRun::pipeline_micro_batches(int64_t micro_batches) const {
  return pp_microbatches_ > 0 ? pp_microbatches_ : micro_batches;
}

torch::Tensor ParallelRun::pipeline_step(Gpt& model, const std::vector<Batch>& micro, const Precision& precision,
                                         int64_t global_targets) {
  PipelineStepOptions o;
  o.schedule = schedule_;
  o.stage = stage_;
  o.total_targets = global_targets;
  o.precision = &precision;
  o.before_backward = backward_hook();
  o.memory_in_use = [device = device_] { return memory_in_use_bytes(device); };
  const bool recut = pp_microbatches_ > 0 && pp_microbatches_ != static_cast<int64_t>(micro.size());
  const std::vector<Batch> parts = recut ? split_micro_batches(micro, pp_microbatches_) : micro;
  micro_batches_ = static_cast<int64_t>(parts.size());
  torch::Tensor loss = pipeline_train_step(model, *groups_.pp(), parts, o, &pipeline_stats_);
  // Only the last stage has a loss; the others' zero is summed with it.
  return loss.to(torch::kFloat);
}

void ParallelRun::finish_backward() {
  if (fully_sharded_) fully_sharded_->finish_backward();
  for (Replicas* r : {&dense_, &experts_})
    if (r->sync) r->sync->finish();
  // After the dp reduction: both copies of the tied embedding then hold the
  // whole gradient (embedding + head, every replica's) and take the same update.
  if (groups_.pipeline_ends() && tied_weight_.defined())
    sum_tied_embedding_grads(tied_weight_, *groups_.pipeline_ends());
  grad_bytes_ = 0;
  for (const auto& p : params_)
    if (p.tensor.grad().defined()) grad_bytes_ += static_cast<int64_t>(p.tensor.grad().nbytes());
}

std::pair<torch::Tensor, bool> ParallelRun::sum_loss_and_any(const torch::Tensor& loss, bool flag) {
  if (!distributed()) return {loss, flag};
  // Every tp rank of a replica computed the same loss: its first one counts it.
  const torch::Tensor mine = groups_.coord().tp == 0 ? loss.detach().reshape({}) : torch::zeros({}, loss.options());
  torch::Tensor both = torch::stack({mine, torch::full({}, flag ? 1.0 : 0.0, loss.options())});
  groups_.world_comm()->all_reduce_sum_now(both, "sum of the step's loss and stop flags");
  return {both[0].clone(), both[1].item<double>() > 0};
}

double ParallelRun::pipeline_evaluate(Gpt& model, const std::vector<Batch>& batches, const Precision& precision) {
  const double sum = pipeline_eval_loss_sum(model, *groups_.pp(), batches, stage_, &precision);
  int64_t count = 0;
  for (const auto& b : batches) count += b.target_count;
  // The last stage has the sum; one of its ranks (dp 0, tp 0) tells the world (rank 0 writes the metrics).
  const bool speaks = stage_.has_head && groups_.coord().dp == 0 && groups_.coord().tp == 0;
  auto t = torch::tensor({speaks ? sum : 0.0}, torch::kDouble);
  groups_.world_comm()->all_reduce_sum_now(t, "sum of the pipeline's evaluation loss");
  return t.item<double>() / static_cast<double>(std::max<int64_t>(count, 1));
}

bool ParallelRun::overflow_on_any_rank(bool local_overflow) {
  if (!distributed() || !ranks_differ()) return local_overflow;
  return groups_.any_rank(local_overflow, "agreement on an fp16 overflow");
}

torch::Tensor ParallelRun::clip_grad_norm(double max_norm, torch::Tensor* fold) {
  std::vector<torch::Tensor> all;
  for (const auto& p : params_) all.push_back(p.tensor);
  if (!distributed() || !ranks_differ()) return gputrain::clip_grad_norm(all, max_norm, fold);
  // One world all-reduce of the squared norm. A value is counted by one rank:
  // each pipeline stage its own parameters (the tied embedding on the first
  // stage), split parameters by every tp rank (each holds its own slice),
  // replicated ones by tp rank 0; ZeRO-2 and 3 spread the gradients over the
  // replicas (each rank holds its own parameters'), otherwise dp rank 0 speaks
  // for the replicas, and for experts each rank of the first ep run for its own.
  std::vector<torch::Tensor> counted;
  for (size_t i = 0; i < params_.size(); ++i) {
    const bool replica_speaks =
        zero_ >= 2 || (expert_[i] ? groups_.coord().dp < groups_.grid().ep() : groups_.coord().dp == 0);
    if (replica_speaks && (sharded_[i] || groups_.coord().tp == 0) && stage_counts(params_[i].name))
      counted.push_back(params_[i].tensor);
  }
  torch::Tensor squared = squared_grad_norm(counted, params_.front().tensor.options());
  groups_.world_comm()->all_reduce_sum_now(squared, "sum of the gradient norm's shards");
  const torch::Tensor norm = squared.sqrt().reshape({});
  scale_grads_to_norm(all, norm, max_norm, fold);
  return norm;
}

void ParallelRun::after_optimizer_step() {
  if (!zero_active()) return;
  for (Replicas* r : {&dense_, &experts_})
    if (r->sync) broadcast_from_owners(*r->group, r->params, r->owners);
}

std::optional<GradSyncTimes> ParallelRun::grad_sync_times() const {
  if (!dense_.sync) return std::nullopt;
  GradSyncTimes t;
  t.buckets = dense_.sync->bucket_count();
  t.backward_end_s = dense_.sync->last_backward_end_s();
  for (const auto& e : dense_.sync->last_step_events()) t.bucket_start_s.push_back(e.launched_s);
  return t;
}

std::optional<ShardTraffic> ParallelRun::shard_traffic() const {
  if (!fully_sharded_) return std::nullopt;
  return fully_sharded_->traffic();
}

std::optional<PipelineLayout> ParallelRun::pipeline_layout() const {
  if (!groups_.pp()) return std::nullopt;
  PipelineLayout p;
  p.schedule = schedule_ == PipelineSchedule::kGpipe ? "gpipe" : "1f1b";
  p.micro_batches = micro_batches_;
  p.bubble_fraction = bubble_fraction(groups_.grid().pp(), micro_batches_);
  for (const auto& st : stages_) p.stage_blocks.emplace_back(st.first, st.last);
  return p;
}

std::vector<RankMemory> ParallelRun::memory_per_rank(const Optimizer& optimizer) {
  int64_t weights = 0;
  for (const auto& p : params_) weights += static_cast<int64_t>(p.tensor.nbytes());
  const double mib = 1024.0 * 1024.0;
  torch::Tensor table = torch::zeros({groups_.world().size, 5}, torch::TensorOptions().dtype(torch::kDouble));
  table[groups_.world().rank][0] = static_cast<double>(weights) / mib;
  table[groups_.world().rank][1] = static_cast<double>(grad_bytes_) / mib;
  table[groups_.world().rank][2] = static_cast<double>(optimizer.state_bytes()) / mib;
  table[groups_.world().rank][3] = static_cast<double>(pipeline_stats_.peak_micro_batches_held);
  table[groups_.world().rank][4] = static_cast<double>(pipeline_stats_.peak_memory_bytes) / mib;
  if (distributed()) groups_.world_comm()->all_reduce_sum_now(table, "gathering per-rank memory for the summary");
  std::vector<RankMemory> out;
  for (int r = 0; r < groups_.world().size; ++r) {
    RankMemory m;
    m.weights_mb = table[r][0].item<double>();
    m.grads_mb = table[r][1].item<double>();
    m.optimizer_state_mb = table[r][2].item<double>();
    if (groups_.pp()) {
      m.stage = groups_.grid().coord(r).pp;
      m.micro_batches_held = static_cast<int64_t>(table[r][3].item<double>());
      m.activations_mb = table[r][4].item<double>();
    }
    out.push_back(m);
  }
  return out;
}

}  // namespace gputrain
