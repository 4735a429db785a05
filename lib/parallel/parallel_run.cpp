#include "parallel/parallel_run.h"

#include <fmt/format.h>

#include "optim/grad_clip.h"
#include "optim/optimizer.h"
#include "parallel/expert_parallel.h"
#include "parallel/tensor_parallel.h"
#include "util/device.h"
#include "util/error.h"

namespace gputrain {
namespace {

using json = nlohmann::ordered_json;

// A tensor's bytes as a flat uint8 tensor (0-dim tensors included).
torch::Tensor as_bytes(const torch::Tensor& t) { return t.contiguous().reshape({-1}).view(torch::kByte); }

// Named tensors between two ranks in three messages (tags tag..tag+2): sizes,
// a JSON list of (name, dtype, shape), the bytes.
void send_tensors(Communicator& comm, const std::vector<NamedTensor>& tensors, int dst, int tag, const std::string& what) {
  const torch::Device dev = comm.tensor_device();
  json meta = json::array();
  std::vector<torch::Tensor> bytes;
  for (const auto& e : tensors) {
    meta.push_back({e.name, static_cast<int>(e.tensor.scalar_type()), e.tensor.sizes().vec()});
    bytes.push_back(as_bytes(e.tensor.detach()).to(dev));
  }
  const std::string text = meta.dump();
  torch::Tensor data = bytes.empty() ? torch::empty({0}, torch::TensorOptions().dtype(torch::kByte).device(dev)) : torch::cat(bytes);
  torch::Tensor text_t = torch::from_blob(const_cast<char*>(text.data()), {static_cast<int64_t>(text.size())},
                                          torch::kByte).to(dev).clone();
  torch::Tensor sizes = torch::tensor({static_cast<int64_t>(text.size()), data.numel()}, torch::kLong).to(dev);
  comm.send(sizes, dst, tag, what).wait();
  comm.send(text_t, dst, tag + 1, what).wait();
  comm.send(data, dst, tag + 2, what).wait();
}

std::vector<NamedTensor> receive_tensors(Communicator& comm, int src, int tag, const std::string& what) {
  const torch::Device dev = comm.tensor_device();
  const auto u8 = torch::TensorOptions().dtype(torch::kByte).device(dev);
  torch::Tensor sizes = torch::empty({2}, torch::TensorOptions().dtype(torch::kLong).device(dev));
  comm.recv(sizes, src, tag, what).wait();
  const torch::Tensor host_sizes = sizes.cpu();
  torch::Tensor text_t = torch::empty({host_sizes[0].item<int64_t>()}, u8);
  torch::Tensor data = torch::empty({host_sizes[1].item<int64_t>()}, u8);
  comm.recv(text_t, src, tag + 1, what).wait();
  comm.recv(data, src, tag + 2, what).wait();
  const torch::Tensor host_text = text_t.cpu();
  const torch::Tensor host_data = data.cpu();
  const json meta = json::parse(std::string(reinterpret_cast<const char*>(host_text.data_ptr<uint8_t>()),
                                            static_cast<size_t>(host_text.numel())));
  std::vector<NamedTensor> out;
  int64_t offset = 0;
  for (const auto& m : meta) {
    const auto dtype = static_cast<torch::ScalarType>(m[1].get<int>());
    const std::vector<int64_t> shape = m[2].get<std::vector<int64_t>>();
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    const int64_t n = numel * static_cast<int64_t>(c10::elementSize(dtype));
    out.push_back({m[0].get<std::string>(), host_data.narrow(0, offset, n).clone().view(dtype).reshape(shape)});
    offset += n;
  }
  return out;
}

}  // namespace

ParallelRun::ParallelRun(const World& world, const ParallelSettings& p, torch::Device device)
    : world_(world),
      grid_(p, world.size),  // a config error unless dp x tp x pp is the world
      coord_(grid_.coord(world.rank)),
      zero_(p.zero),
      bucket_mb_(p.bucket_mb),
      schedule_(p.pp_schedule),
      pp_microbatches_(p.pp_microbatches) {
  if (!world.distributed() && !world.launched()) return;
  comm_ = std::make_unique<Communicator>(world, p.backend, device, p.timeout_s);
  // Every rank makes its groups in the same order: tp, pp, the pipeline's ends, dp, ep, expert replicas.
  if (grid_.tp() > 1)
    tp_comm_ = comm_->subgroup(grid_.tp_group(world.rank), fmt::format("tp(dp{},pp{})", coord_.dp, coord_.pp));
  if (grid_.pp() > 1) {
    const std::vector<int> stages = grid_.pp_group(world.rank);
    pp_comm_ = comm_->subgroup(stages, fmt::format("pp(dp{},tp{})", coord_.dp, coord_.tp));
    if (coord_.pp == 0 || coord_.pp == grid_.pp() - 1)
      ends_ = comm_->subgroup({stages.front(), stages.back()}, fmt::format("ends(dp{},tp{})", coord_.dp, coord_.tp));
  }
  if (grid_.dp() == world.size) {
    dp_ = comm_.get();
  } else if (grid_.dp() > 1) {
    dp_own_ = comm_->subgroup(grid_.dp_group(world.rank), fmt::format("dp(tp{},pp{})", coord_.tp, coord_.pp));
    dp_ = dp_own_.get();
  }
  if (grid_.ep() > 1) {
    const int run = coord_.dp / grid_.ep(), place = coord_.dp % grid_.ep();
    ep_comm_ = comm_->subgroup(grid_.ep_group(world.rank), fmt::format("ep(tp{},pp{},run{})", coord_.tp, coord_.pp, run));
    if (grid_.dp() > grid_.ep())
      expert_dp_ = comm_->subgroup(grid_.expert_replica_group(world.rank),
                                   fmt::format("experts(tp{},pp{},place{})", coord_.tp, coord_.pp, place));
  }
}

ParallelRun::~ParallelRun() = default;

std::string ParallelRun::describe() const {
  if (!distributed()) return "1 process";
  int64_t mine = 0, total = 0, mine_tensors = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    total += params_[i].tensor.numel();
    if (!zero_active() || owned_.count(params_[i].name)) {
      mine += params_[i].tensor.numel();
      ++mine_tensors;
    }
  }
  std::string s = fmt::format("{} process(es) ({}), {}; grid dp {} x pp {} x tp {}, this rank dp {} pp {} tp {}",
                              world_.size, comm_->backend_name(), world_.describe(), grid_.dp(), grid_.pp(), grid_.tp(),
                              coord_.dp, coord_.pp, coord_.tp);
  if (tp_comm_) {
    int64_t split = 0;
    for (const auto& t : split_) split += t.dim >= 0 ? 1 : 0;
    s += fmt::format("; tensor parallel: {} of {} parameter tensors split over {} ranks", split, split_.size(), grid_.tp());
  }
  if (pp_comm_)
    s += fmt::format("; pipeline: stage {} of {} runs blocks [{}, {}){}{}, {} schedule", coord_.pp, grid_.pp(),
                     stage_.first, stage_.last, stage_.embeds ? " and the embeddings" : "",
                     stage_.has_head ? " and the head" : "", schedule_ == PipelineSchedule::kGpipe ? "gpipe" : "1f1b");
  if (dense_.sync)
    s += fmt::format("; data parallel: {} gradient bucket(s) of up to {:g} MiB, reduced over {} replica(s) during backward",
                     dense_.sync->bucket_count(), bucket_mb_, grid_.dp());
  if (ep_comm_)
    s += fmt::format("; expert parallel: this rank holds experts {}-{} of each mixture layer's {} (ep {}), their "
                     "gradients reduced over {} replica(s)",
                     first_expert_, first_expert_ + local_experts_ - 1, local_experts_ * grid_.ep(), grid_.ep(),
                     grid_.dp() / grid_.ep());
  if (zero_active())
    s += fmt::format("; ZeRO-{}: this rank updates {} of {} parameter tensors ({:.1f}% of the values){}", zero_,
                     mine_tensors, params_.size(), 100.0 * static_cast<double>(mine) / std::max<int64_t>(1, total),
                     zero_ == 2 ? " and keeps only their gradients" : "");
  return s;
}

void ParallelRun::split_tensors(Gpt& model) {
  if (tp_comm_) split_ = parallelize_tensor(model, *tp_comm_);
}

void ParallelRun::keep_pipeline_stage(Gpt& model) {
  stages_ = split_stages(model->cfg, grid_.pp());
  stage_ = stages_[static_cast<size_t>(coord_.pp)];
  if (!pp_comm_) return;
  for (auto& name : keep_stage(model, stage_)) held_.insert(std::move(name));
  if (model->cfg.tie_embeddings && (stage_.embeds || stage_.has_head)) tied_weight_ = model->transformer->wte->weight;
}

void ParallelRun::keep_experts(Gpt& model) {
  if (!ep_comm_) return;
  local_experts_ = model->cfg.moe.experts / ep_comm_->size();
  first_expert_ = ep_comm_->rank() * local_experts_;
  if (!pp_comm_)
    for (const auto& item : model->named_parameters()) held_.insert(item.key());
  for (const auto& name : parallelize_experts(model, *ep_comm_)) held_.erase(name);
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

void ParallelRun::attach(const std::vector<NamedTensor>& named_params) {
  named_ = named_params;
  // Frozen parameters (LoRA's base) have no gradients to reduce, clip or own.
  std::vector<NamedTensor> trainable;
  for (const auto& p : named_params)
    if (p.tensor.requires_grad()) trainable.push_back(p);
  params_ = in_gradient_order(trainable);
  sharded_.assign(params_.size(), 0);
  expert_.assign(params_.size(), 0);
  for (size_t i = 0; i < params_.size(); ++i) {
    for (const auto& t : split_)
      if (t.name == params_[i].name) sharded_[i] = t.dim >= 0;
    expert_[i] = ep_comm_ && is_expert_parameter(params_[i].name);
  }
  if (!dp_) return;
  std::vector<NamedTensor> dense_named, expert_named;
  for (const auto& p : named_params) (ep_comm_ && is_expert_parameter(p.name) ? expert_named : dense_named).push_back(p);
  for (size_t i = 0; i < params_.size(); ++i) (expert_[i] ? experts_ : dense_).params.push_back(params_[i]);
  dense_.group = dp_;
  experts_.group = expert_dp_.get();
  replicate(dense_, dense_named);
  replicate(experts_, expert_named);
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
  const std::set<std::string>* mine = updated_names();
  if (!mine) return groups;
  std::vector<ParamGroup> out;
  for (auto& g : groups) {
    ParamGroup kept = g;
    kept.names.clear();
    kept.params.clear();
    for (size_t i = 0; i < g.names.size(); ++i)
      if (mine->count(g.names[i])) {
        kept.names.push_back(g.names[i]);
        kept.params.push_back(g.params[i]);
      }
    if (!kept.params.empty()) out.push_back(std::move(kept));
  }
  return out;
}

std::map<std::string, torch::Tensor> ParallelRun::owned_state(std::map<std::string, torch::Tensor> state) const {
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

std::vector<double> ParallelRun::sum_over_world(std::vector<double> values, const std::string& what) {
  if (!distributed()) return values;
  torch::Tensor t = torch::tensor(values, torch::TensorOptions().dtype(torch::kDouble)).to(comm_->tensor_device());
  comm_->all_reduce_sum_now(t, what);
  t = t.cpu();
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

int64_t ParallelRun::global_targets(int64_t local_targets) {
  if (!distributed()) return local_targets;
  // The tp ranks and pipeline stages of a replica read the same batch: its first one counts it.
  auto t = torch::tensor({coord_.tp == 0 && coord_.pp == 0 ? local_targets : 0}, torch::TensorOptions().dtype(torch::kLong)).to(comm_->tensor_device());
  comm_->all_reduce_sum_now(t, "sum of the step's target tokens");
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
  const torch::Device device = model->transformer->ln_f->weight.device();
  o.memory_in_use = [device] { return memory_in_use_bytes(device); };
  const bool recut = pp_microbatches_ > 0 && pp_microbatches_ != static_cast<int64_t>(micro.size());
  const std::vector<Batch> parts = recut ? split_micro_batches(micro, pp_microbatches_) : micro;
  micro_batches_ = static_cast<int64_t>(parts.size());
  torch::Tensor loss = pipeline_train_step(model, *pp_comm_, parts, o, &pipeline_stats_);
  // Only the last stage has a loss; the others' zero is summed with it.
  return loss.to(torch::kFloat);
}

void ParallelRun::finish_backward() {
  for (Replicas* r : {&dense_, &experts_})
    if (r->sync) r->sync->finish();
  // After the dp reduction: both copies of the tied embedding then hold the
  // whole gradient (embedding + head, every replica's) and take the same update.
  if (ends_ && tied_weight_.defined()) sum_tied_embedding_grads(tied_weight_, *ends_);
  grad_bytes_ = 0;
  for (const auto& p : params_)
    if (p.tensor.grad().defined()) grad_bytes_ += static_cast<int64_t>(p.tensor.grad().nbytes());
}

std::pair<torch::Tensor, bool> ParallelRun::sum_loss_and_any(const torch::Tensor& loss, bool flag) {
  if (!distributed()) return {loss, flag};
  // Every tp rank of a replica computed the same loss: its first one counts it.
  const torch::Tensor mine = coord_.tp == 0 ? loss.detach().reshape({}) : torch::zeros({}, loss.options());
  torch::Tensor both = torch::stack({mine, torch::full({}, flag ? 1.0 : 0.0, loss.options())});
  comm_->all_reduce_sum_now(both, "sum of the step's loss and stop flags");
  return {both[0].clone(), both[1].item<double>() > 0};
}

double ParallelRun::pipeline_evaluate(Gpt& model, const std::vector<Batch>& batches, const Precision& precision) {
  const double sum = pipeline_eval_loss_sum(model, *pp_comm_, batches, stage_, &precision);
  int64_t count = 0;
  for (const auto& b : batches) count += b.target_count;
  // The last stage has the sum; one of its ranks (dp 0, tp 0) tells the world (rank 0 writes the metrics).
  const bool speaks = stage_.has_head && coord_.dp == 0 && coord_.tp == 0;
  auto t = torch::tensor({speaks ? sum : 0.0}, torch::kDouble).to(comm_->tensor_device());
  comm_->all_reduce_sum_now(t, "sum of the pipeline's evaluation loss");
  return t.item<double>() / static_cast<double>(std::max<int64_t>(count, 1));
}

bool ParallelRun::any_rank(bool flag, const std::string& what) {
  if (!distributed()) return flag;
  auto t = torch::tensor({flag ? 1 : 0}, torch::TensorOptions().dtype(torch::kInt)).to(comm_->tensor_device());
  comm_->all_reduce_sum_now(t, what);
  return t.item<int>() > 0;
}

bool ParallelRun::overflow_on_any_rank(bool local_overflow) {
  if (!distributed() || !ranks_differ()) return local_overflow;
  return any_rank(local_overflow, "agreement on an fp16 overflow");
}

torch::Tensor ParallelRun::clip_grad_norm(double max_norm, torch::Tensor* fold) {
  std::vector<torch::Tensor> all;
  for (const auto& p : params_) all.push_back(p.tensor);
  if (!distributed() || !ranks_differ()) return gputrain::clip_grad_norm(all, max_norm, fold);
  // One world all-reduce of the squared norm. A value is counted by one rank:
  // each pipeline stage its own parameters (the tied embedding on the first
  // stage), split parameters by every tp rank (each holds its own slice),
  // replicated ones by tp rank 0; ZeRO-2 spreads the gradients over the
  // replicas (each rank holds its own parameters'), otherwise dp rank 0 speaks
  // for the replicas, and for experts each rank of the first ep run for its own.
  std::vector<torch::Tensor> counted;
  for (size_t i = 0; i < params_.size(); ++i) {
    const bool replica_speaks = zero_ == 2 || (expert_[i] ? coord_.dp < grid_.ep() : coord_.dp == 0);
    if (replica_speaks && (sharded_[i] || coord_.tp == 0) && stage_counts(params_[i].name))
      counted.push_back(params_[i].tensor);
  }
  torch::Tensor squared = squared_grad_norm(counted, params_.front().tensor.options());
  comm_->all_reduce_sum_now(squared, "sum of the gradient norm's shards");
  const torch::Tensor norm = squared.sqrt().reshape({});
  scale_grads_to_norm(all, norm, max_norm, fold);
  return norm;
}

void ParallelRun::after_optimizer_step() {
  if (!zero_active()) return;
  for (Replicas* r : {&dense_, &experts_})
    if (r->sync) broadcast_from_owners(*r->group, r->params, r->owners);
}

ParallelRun::CheckpointShards ParallelRun::gather_checkpoint(const Optimizer& optimizer) {
  std::vector<NamedTensor> state;
  for (const auto& e : optimizer.state()) state.push_back({e.name, e.tensor});
  CheckpointShards out;
  // Which ranks hold what rank 0 needs: each (stage, tp shard)'s model from
  // the first dp replica; its optimizer state from there too, or from every
  // dp rank under ZeRO. Under expert parallelism the other ranks of the first
  // ep run send their experts and the experts' state. The parts are joined, so
  // the files do not depend on parallel.pp or ep (the tied embedding and its
  // state, held by two stages alike, are written once).
  auto sends_model = [&](int r) { return grid_.coord(r).dp < grid_.ep(); };
  auto sends_state = [&](int r) { return zero_active() || grid_.coord(r).dp < grid_.ep(); };
  if (world_.rank != 0) {
    // Past dp rank 0 (which sends the rest), a rank of the first ep run sends its experts' part.
    auto only_experts = [&](std::vector<NamedTensor> v, bool all_owned) {
      if (coord_.dp > 0 && !all_owned) std::erase_if(v, [](const NamedTensor& e) { return !is_expert_parameter(e.name); });
      return v;
    };
    if (sends_model(world_.rank))
      send_tensors(*comm_, only_experts(named_, false), 0, 1, "sending model shards to rank 0 for a checkpoint");
    if (sends_state(world_.rank))  // under ZeRO, the state of whatever this rank owns
      send_tensors(*comm_, only_experts(std::move(state), zero_active()), 0, 4,
                   "sending optimizer state to rank 0 for a checkpoint");
    return out;
  }
  out.model.resize(static_cast<size_t>(grid_.tp()));
  out.optimizer.resize(static_cast<size_t>(grid_.tp()));
  std::vector<std::set<std::string>> seen_model(out.model.size()), seen_state(out.model.size());
  auto add = [](std::vector<NamedTensor>& into, std::set<std::string>& seen, std::vector<NamedTensor> part) {
    for (auto& e : part)
      if (seen.insert(e.name).second) into.push_back(std::move(e));
  };
  add(out.model[0], seen_model[0], named_);
  add(out.optimizer[0], seen_state[0], std::move(state));
  for (int r = 1; r < world_.size; ++r) {
    const auto tp = static_cast<size_t>(grid_.coord(r).tp);
    if (sends_model(r))
      add(out.model[tp], seen_model[tp],
          receive_tensors(*comm_, r, 1, "receiving rank " + std::to_string(r) + "'s model shards for a checkpoint"));
    if (sends_state(r))
      add(out.optimizer[tp], seen_state[tp],
          receive_tensors(*comm_, r, 4, "receiving rank " + std::to_string(r) + "'s optimizer state for a checkpoint"));
  }
  return out;
}

json ParallelRun::grad_sync_report() const {
  if (!dense_.sync) return nullptr;
  const auto& events = dense_.sync->last_step_events();
  const double end = dense_.sync->last_backward_end_s();
  int64_t during = 0;
  json launches = json::array();
  for (const auto& e : events) {
    during += e.launched_s < end ? 1 : 0;
    launches.push_back(std::round(e.launched_s * 1e6) / 1e3);
  }
  json j;
  j["buckets"] = dense_.sync->bucket_count();
  j["started_during_backward"] = during;  // of the last step's buckets
  j["backward_ms"] = std::round(end * 1e6) / 1e3;  // from the last micro-batch's backward start
  j["bucket_start_ms"] = launches;
  return j;
}

json ParallelRun::pipeline_report() const {
  if (!pp_comm_) return nullptr;
  json j;
  j["schedule"] = schedule_ == PipelineSchedule::kGpipe ? "gpipe" : "1f1b";
  j["micro_batches"] = micro_batches_;
  j["bubble_fraction"] = std::round(bubble_fraction(grid_.pp(), micro_batches_) * 1e4) / 1e4;
  json blocks = json::array();  // per stage: [first, last) of the block stack
  for (const auto& st : stages_) blocks.push_back({st.first, st.last});
  j["stage_blocks"] = blocks;
  return j;
}

json ParallelRun::memory_per_rank(const Optimizer& optimizer) {
  int64_t weights = 0;
  for (const auto& p : params_) weights += static_cast<int64_t>(p.tensor.nbytes());
  const double mib = 1024.0 * 1024.0;
  const torch::Device dev = distributed() ? comm_->tensor_device() : torch::Device(torch::kCPU);
  torch::Tensor table = torch::zeros({world_.size, 5}, torch::TensorOptions().dtype(torch::kDouble).device(dev));
  table[world_.rank][0] = static_cast<double>(weights) / mib;
  table[world_.rank][1] = static_cast<double>(grad_bytes_) / mib;
  table[world_.rank][2] = static_cast<double>(optimizer.state_bytes()) / mib;
  table[world_.rank][3] = static_cast<double>(pipeline_stats_.peak_micro_batches_held);
  table[world_.rank][4] = static_cast<double>(pipeline_stats_.peak_memory_bytes) / mib;
  if (distributed()) comm_->all_reduce_sum_now(table, "gathering per-rank memory for the summary");
  table = table.cpu();
  json out = json::array();
  auto mb = [&](int r, int col) { return std::round(table[r][col].item<double>() * 1000) / 1000; };
  for (int r = 0; r < world_.size; ++r) {
    json row = {{"rank", r}, {"weights_mb", mb(r, 0)}, {"grads_mb", mb(r, 1)}, {"optimizer_state_mb", mb(r, 2)}};
    if (pp_comm_) {
      row["stage"] = grid_.coord(r).pp;
      row["micro_batches_held"] = static_cast<int64_t>(table[r][3].item<double>());  // at the last step's peak
      row["activations_mb"] = mb(r, 4);  // memory in use at that peak above the step's start
    }
    out.push_back(std::move(row));
  }
  return out;
}

}  // namespace gputrain
