#include "parallel/parallel_run.h"

#include <fmt/format.h>

#include "optim/grad_clip.h"
#include "optim/optimizer.h"
#include "parallel/grid.h"
#include "util/device.h"
#include "util/error.h"

namespace gputrain {
namespace {

using json = nlohmann::ordered_json;

// A tensor's bytes as a flat uint8 tensor (0-dim tensors included).
torch::Tensor as_bytes(const torch::Tensor& t) { return t.contiguous().reshape({-1}).view(torch::kByte); }

}  // namespace

ParallelRun::ParallelRun(const World& world, const ParallelSettings& p, torch::Device device)
    : world_(world), zero_(p.zero), bucket_mb_(p.bucket_mb) {
  const Grid grid(p, world.size);  // a config error unless dp x tp x pp is the world
  if (grid.tp() > 1 || grid.pp() > 1)
    throw config_error("parallel.tp and parallel.pp: training with tensor or pipeline parallelism is not built yet "
                       "(`gputrain plan --world-size N` prints the grid)\n    fix: set parallel.tp: 1 and parallel.pp: 1");
  if (world.distributed() || world.launched())
    comm_ = std::make_unique<Communicator>(world, p.backend, device, p.timeout_s);
}

ParallelRun::~ParallelRun() = default;

std::string ParallelRun::describe() const {
  if (!distributed()) return "1 process";
  int64_t mine = 0, total = 0, mine_tensors = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    total += params_[i].tensor.numel();
    if (owners_.empty() || owners_[i] == world_.rank) {
      mine += params_[i].tensor.numel();
      ++mine_tensors;
    }
  }
  std::string s = fmt::format("data parallel over {} process(es) ({}), {}; {} gradient bucket(s) of up to {:g} MiB, "
                              "reduced during backward",
                              world_.size, comm_->backend_name(), world_.describe(), sync_ ? sync_->bucket_count() : 0,
                              bucket_mb_);
  if (zero_ > 0)
    s += fmt::format("; ZeRO-{}: this rank updates {} of {} parameter tensors ({:.1f}% of the values){}", zero_,
                     mine_tensors, params_.size(), 100.0 * static_cast<double>(mine) / std::max<int64_t>(1, total),
                     zero_ == 2 ? " and keeps only their gradients" : "");
  return s;
}

void ParallelRun::attach(const std::vector<NamedTensor>& named_params) {
  params_ = in_gradient_order(named_params);
  if (!distributed()) return;
  broadcast_parameters(*comm_, named_params);
  if (zero_ > 0) {
    std::vector<int64_t> sizes;
    for (const auto& p : params_) sizes.push_back(p.tensor.numel());
    owners_ = partition_contiguous(sizes, world_.size);
    for (size_t i = 0; i < params_.size(); ++i)
      if (owners_[i] == world_.rank) owned_.insert(params_[i].name);
  }
  sync_ = std::make_unique<GradientSync>(*comm_, params_, bucket_mb_, zero_ == 2 ? owners_ : std::vector<int>{});
}

std::vector<ParamGroup> ParallelRun::owned_groups(std::vector<ParamGroup> groups) const {
  if (zero_ == 0 || !distributed()) return groups;
  std::vector<ParamGroup> out;
  for (auto& g : groups) {
    ParamGroup kept = g;
    kept.names.clear();
    kept.params.clear();
    for (size_t i = 0; i < g.names.size(); ++i)
      if (owned_.count(g.names[i])) {
        kept.names.push_back(g.names[i]);
        kept.params.push_back(g.params[i]);
      }
    if (!kept.params.empty()) out.push_back(std::move(kept));
  }
  return out;
}

std::map<std::string, torch::Tensor> ParallelRun::owned_state(std::map<std::string, torch::Tensor> state) const {
  if (zero_ == 0 || !distributed()) return state;
  std::map<std::string, torch::Tensor> out;
  for (auto& [key, t] : state) {
    // State keys are "<parameter name>.<slot>"; slots have no dots.
    const auto dot = key.rfind('.');
    if (dot != std::string::npos && owned_.count(key.substr(0, dot))) out.emplace(key, t);
  }
  return out;
}

int64_t ParallelRun::global_targets(int64_t local_targets) {
  if (!distributed()) return local_targets;
  auto t = torch::tensor({local_targets}, torch::TensorOptions().dtype(torch::kLong)).to(comm_->tensor_device());
  comm_->all_reduce_sum_now(t, "sum of the step's target tokens");
  return t.item<int64_t>();
}

AccumulateOptions ParallelRun::accumulate_options(int64_t global_targets) {
  AccumulateOptions o;
  o.total_targets = global_targets;
  if (sync_) o.before_backward = [this](bool last) { sync_->prepare_backward(last); };
  return o;
}

void ParallelRun::finish_backward() {
  if (sync_) sync_->finish();
  grad_bytes_ = 0;
  for (const auto& p : params_)
    if (p.tensor.grad().defined()) grad_bytes_ += static_cast<int64_t>(p.tensor.grad().nbytes());
}

std::pair<torch::Tensor, bool> ParallelRun::sum_loss_and_any(const torch::Tensor& loss, bool flag) {
  if (!distributed()) return {loss, flag};
  torch::Tensor both = torch::stack({loss.detach().reshape({}), torch::full({}, flag ? 1.0 : 0.0, loss.options())});
  comm_->all_reduce_sum_now(both, "sum of the step's loss and stop flags");
  return {both[0].clone(), both[1].item<double>() > 0};
}

bool ParallelRun::any_rank(bool flag, const std::string& what) {
  if (!distributed()) return flag;
  auto t = torch::tensor({flag ? 1 : 0}, torch::TensorOptions().dtype(torch::kInt)).to(comm_->tensor_device());
  comm_->all_reduce_sum_now(t, what);
  return t.item<int>() > 0;
}

bool ParallelRun::overflow_on_any_rank(bool local_overflow) {
  if (zero_ != 2) return local_overflow;
  return any_rank(local_overflow, "agreement on an fp16 overflow");
}

torch::Tensor ParallelRun::clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm) {
  if (zero_ != 2 || !distributed()) return gputrain::clip_grad_norm(params, max_norm);
  return gputrain::clip_grad_norm(params, max_norm, [this](torch::Tensor& squared) {
    comm_->all_reduce_sum_now(squared, "sum of the gradient norm's shards");
  });
}

void ParallelRun::after_optimizer_step() {
  if (zero_ > 0 && distributed()) broadcast_from_owners(*comm_, params_, owners_);
}

std::vector<NamedTensor> ParallelRun::gather_optimizer_state(const Optimizer& optimizer) {
  std::vector<NamedTensor> all;
  if (world_.rank == 0)
    for (const auto& e : optimizer.state()) all.push_back({e.name, e.tensor});
  if (zero_ == 0 || !distributed()) return all;
  const torch::Device dev = comm_->tensor_device();
  const auto u8 = torch::TensorOptions().dtype(torch::kByte).device(dev);
  const auto i64 = torch::TensorOptions().dtype(torch::kLong).device(dev);
  if (world_.rank != 0) {
    // Three messages to rank 0: sizes, a JSON list of (name, dtype, shape), the bytes.
    json meta = json::array();
    std::vector<torch::Tensor> bytes;
    for (const auto& e : optimizer.state()) {
      meta.push_back({e.name, static_cast<int>(e.tensor.scalar_type()), e.tensor.sizes().vec()});
      bytes.push_back(as_bytes(e.tensor).to(dev));
    }
    const std::string text = meta.dump();
    torch::Tensor data = bytes.empty() ? torch::empty({0}, u8) : torch::cat(bytes);
    torch::Tensor text_t = torch::from_blob(const_cast<char*>(text.data()), {static_cast<int64_t>(text.size())},
                                            torch::kByte).to(dev).clone();
    torch::Tensor sizes = torch::tensor({static_cast<int64_t>(text.size()), data.numel()}, torch::kLong).to(dev);
    const std::string what = "sending optimizer state to rank 0 for a checkpoint";
    comm_->send(sizes, 0, 1, what).wait();
    comm_->send(text_t, 0, 2, what).wait();
    comm_->send(data, 0, 3, what).wait();
    return all;
  }
  for (int r = 1; r < world_.size; ++r) {
    const std::string what = "receiving rank " + std::to_string(r) + "'s optimizer state for a checkpoint";
    torch::Tensor sizes = torch::empty({2}, i64);
    comm_->recv(sizes, r, 1, what).wait();
    const torch::Tensor host_sizes = sizes.cpu();
    torch::Tensor text_t = torch::empty({host_sizes[0].item<int64_t>()}, u8);
    torch::Tensor data = torch::empty({host_sizes[1].item<int64_t>()}, u8);
    comm_->recv(text_t, r, 2, what).wait();
    comm_->recv(data, r, 3, what).wait();
    const torch::Tensor host_text = text_t.cpu();
    const json meta = json::parse(std::string(reinterpret_cast<const char*>(host_text.data_ptr<uint8_t>()),
                                              static_cast<size_t>(host_text.numel())));
    int64_t offset = 0;
    for (const auto& m : meta) {
      const auto dtype = static_cast<torch::ScalarType>(m[1].get<int>());
      const std::vector<int64_t> shape = m[2].get<std::vector<int64_t>>();
      int64_t numel = 1;
      for (int64_t d : shape) numel *= d;
      const int64_t n = numel * static_cast<int64_t>(c10::elementSize(dtype));
      all.push_back({m[0].get<std::string>(), data.narrow(0, offset, n).clone().view(dtype).reshape(shape)});
      offset += n;
    }
  }
  return all;
}

json ParallelRun::grad_sync_report() const {
  if (!sync_) return nullptr;
  const auto& events = sync_->last_step_events();
  const double end = sync_->last_backward_end_s();
  int64_t during = 0;
  json launches = json::array();
  for (const auto& e : events) {
    during += e.launched_s < end ? 1 : 0;
    launches.push_back(std::round(e.launched_s * 1e6) / 1e3);
  }
  json j;
  j["buckets"] = sync_->bucket_count();
  j["started_during_backward"] = during;  // of the last step's buckets
  j["backward_ms"] = std::round(end * 1e6) / 1e3;  // from the last micro-batch's backward start
  j["bucket_start_ms"] = launches;
  return j;
}

json ParallelRun::memory_per_rank(const Optimizer& optimizer) {
  int64_t weights = 0;
  for (const auto& p : params_) weights += static_cast<int64_t>(p.tensor.nbytes());
  const double mib = 1024.0 * 1024.0;
  const torch::Device dev = distributed() ? comm_->tensor_device() : torch::Device(torch::kCPU);
  torch::Tensor table = torch::zeros({world_.size, 3}, torch::TensorOptions().dtype(torch::kDouble).device(dev));
  table[world_.rank][0] = static_cast<double>(weights) / mib;
  table[world_.rank][1] = static_cast<double>(grad_bytes_) / mib;
  table[world_.rank][2] = static_cast<double>(optimizer.state_bytes()) / mib;
  if (distributed()) comm_->all_reduce_sum_now(table, "gathering per-rank memory for the summary");
  table = table.cpu();
  json out = json::array();
  for (int r = 0; r < world_.size; ++r)
    out.push_back({{"rank", r},
                   {"weights_mb", std::round(table[r][0].item<double>() * 1000) / 1000},
                   {"grads_mb", std::round(table[r][1].item<double>() * 1000) / 1000},
                   {"optimizer_state_mb", std::round(table[r][2].item<double>() * 1000) / 1000}});
  return out;
}

}  // namespace gputrain
