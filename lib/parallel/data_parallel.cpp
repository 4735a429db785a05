#include "parallel/data_parallel.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>

#include "util/error.h"
#include "util/failpoint.h"

namespace gputrain {
namespace {

using Clock = std::chrono::steady_clock;

torch::autograd::Node* node_of(const std::shared_ptr<void>& p) { return static_cast<torch::autograd::Node*>(p.get()); }

}  // namespace

std::vector<int> partition_contiguous(const std::vector<int64_t>& sizes, int parts) {
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  std::vector<int> owner(sizes.size(), 0);
  int64_t before = 0;  // size of the tensors ahead of this one
  int part = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    // A tensor goes to the run whose share its middle falls in: runs stay
    // contiguous and each is within one tensor of total / parts.
    const double middle = static_cast<double>(before) + static_cast<double>(sizes[i]) / 2.0;
    const int want = std::min(parts - 1, static_cast<int>(middle * parts / std::max<double>(1.0, total)));
    part = std::max(part, want);
    owner[i] = part;
    before += sizes[i];
  }
  return owner;
}

std::vector<NamedTensor> in_gradient_order(const std::vector<NamedTensor>& params) {
  return std::vector<NamedTensor>(params.rbegin(), params.rend());
}

GradientSync::GradientSync(Communicator& comm, std::vector<NamedTensor> params, double bucket_mb,
                           std::vector<int> owners)
    : comm_(comm), params_(std::move(params)), seen_(params_.size(), 0) {
  const auto bucket_bytes = static_cast<int64_t>(bucket_mb * 1024 * 1024);
  bucket_of_.resize(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const torch::Tensor& p = params_[i].tensor;
    const int owner = owners.empty() ? -1 : owners[i];
    const bool start_new = buckets_.empty() || buckets_.back().owner != owner ||
                           params_[buckets_.back().members.front()].tensor.scalar_type() != p.scalar_type() ||
                           buckets_.back().numel * p.element_size() >= bucket_bytes;
    if (start_new) buckets_.push_back(Bucket{{}, 0, owner, {}, {}, 0});
    buckets_.back().members.push_back(i);
    buckets_.back().numel += p.numel();
    bucket_of_[i] = buckets_.size() - 1;
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    std::shared_ptr<torch::autograd::Node> acc = torch::autograd::impl::grad_accumulator(params_[i].tensor);
    if (!acc)
      throw std::invalid_argument("data parallel: parameter '" + params_[i].name + "' does not require gradients");
    hook_keys_.push_back(acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, i](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          on_gradient_ready(i);
          return outputs;
        })));
    accumulators_.push_back(acc);
  }
}

GradientSync::~GradientSync() {
  for (size_t i = 0; i < accumulators_.size(); ++i) node_of(accumulators_[i])->del_post_hook(hook_keys_[i]);
}

double GradientSync::seconds_since_epoch() const {
  return std::chrono::duration<double>(Clock::now() - epoch_).count();
}

void GradientSync::prepare_backward(bool sends) {
  std::lock_guard<std::mutex> lock(mu_);
  sending_ = sends;
  if (!sends) return;
  std::fill(seen_.begin(), seen_.end(), 0);
  for (auto& b : buckets_) b.ready = 0;
  events_.clear();
  epoch_ = Clock::now();
}

void GradientSync::on_gradient_ready(size_t i) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!sending_) return;
  if (seen_[i])
    throw runtime_error("data parallel: parameter '" + params_[i].name +
                        "' received its gradient twice in one backward pass, which bucketed all-reduce cannot follow");
  seen_[i] = 1;
  Bucket& b = buckets_[bucket_of_[i]];
  if (++b.ready == b.members.size()) launch(b, bucket_of_[i]);
}

void GradientSync::launch(Bucket& b, size_t index) {
  const torch::Tensor& first = params_[b.members.front()].tensor;
  if (!b.flat.defined()) b.flat = torch::empty({b.numel}, first.options().requires_grad(false));
  int64_t offset = 0;
  for (size_t m : b.members) {
    const torch::Tensor& p = params_[m].tensor;
    b.flat.narrow(0, offset, p.numel()).copy_(p.grad().reshape(-1));
    offset += p.numel();
  }
  const std::string what = "gradient bucket " + std::to_string(index) + " of " + std::to_string(buckets_.size()) +
                           (b.owner < 0 ? " (all-reduce)" : " (reduce to rank " + std::to_string(b.owner) + ")");
  b.pending = b.owner < 0 ? comm_.all_reduce_sum(b.flat, what) : comm_.reduce_sum(b.flat, b.owner, what);
  events_.push_back({seconds_since_epoch(), b.numel * first.element_size()});
  if (events_.size() == 1) first_launched_ = index;
  // Tests (act) hold backward here until the step's first bucket is summed: that collective then
  // ran while backward did, however the threads were scheduled.
  failpoint("ddp.bucket_launched", [&] { buckets_[first_launched_].pending.wait(); });
}

void GradientSync::finish() {
  std::lock_guard<std::mutex> lock(mu_);
  backward_end_s_ = seconds_since_epoch();
  sending_ = false;
  for (size_t k = 0; k < buckets_.size(); ++k) {
    Bucket& b = buckets_[k];
    if (b.ready != b.members.size()) {
      for (size_t m : b.members)
        if (!seen_[m])
          throw runtime_error("data parallel: parameter '" + params_[m].name +
                              "' got no gradient in backward; every rank must use every parameter");
    }
    b.pending.wait();
    const bool keep = b.owner < 0 || b.owner == comm_.rank();
    int64_t offset = 0;
    for (size_t m : b.members) {
      torch::Tensor p = params_[m].tensor;
      if (keep) p.mutable_grad().copy_(b.flat.narrow(0, offset, p.numel()).view_as(p));
      else p.mutable_grad() = torch::Tensor();  // ZeRO-2: its owner holds the sum
      offset += p.numel();
    }
    if (!keep) b.flat = torch::Tensor();  // the buffer is only needed for the send; free it between steps
  }
}

void broadcast_parameters(Communicator& comm, const std::vector<NamedTensor>& params) {
  torch::NoGradGuard no_grad;
  const torch::Device wire = comm.tensor_device();
  std::vector<PendingCollective> pending;
  std::vector<torch::Tensor> views;
  for (const auto& p : params) {
    const std::string what = "broadcast of parameter '" + p.name + "' from rank 0";
    if (p.tensor.device() == wire) {
      views.push_back(p.tensor.detach());
      pending.push_back(comm.broadcast(views.back(), 0, what));
      continue;
    }
    torch::Tensor staged = p.tensor.detach().to(wire);  // one parameter on the wire at a time
    comm.broadcast(staged, 0, what).wait();
    p.tensor.detach().copy_(staged);
  }
  for (auto& w : pending) w.wait();
}

void broadcast_from_owners(Communicator& comm, const std::vector<NamedTensor>& params, const std::vector<int>& owners) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> flats(static_cast<size_t>(comm.size()));
  std::vector<PendingCollective> pending(flats.size());
  for (int r = 0; r < comm.size(); ++r) {
    std::vector<torch::Tensor> mine;
    int64_t numel = 0;
    for (size_t i = 0; i < params.size(); ++i)
      if (owners[i] == r) {
        mine.push_back(params[i].tensor.detach().reshape(-1));
        numel += params[i].tensor.numel();
      }
    if (mine.empty()) continue;
    flats[static_cast<size_t>(r)] = r == comm.rank() ? torch::cat(mine) : torch::empty({numel}, mine.front().options());
    pending[static_cast<size_t>(r)] = comm.broadcast(
        flats[static_cast<size_t>(r)], r, "broadcast of rank " + std::to_string(r) + "'s updated parameters");
  }
  for (int r = 0; r < comm.size(); ++r) {
    pending[static_cast<size_t>(r)].wait();
    if (r == comm.rank() || !flats[static_cast<size_t>(r)].defined()) continue;
    int64_t offset = 0;
    for (size_t i = 0; i < params.size(); ++i)
      if (owners[i] == r) {
        const torch::Tensor& p = params[i].tensor;
        p.detach().copy_(flats[static_cast<size_t>(r)].narrow(0, offset, p.numel()).view_as(p));
        offset += p.numel();
      }
  }
}

}  // namespace gputrain
