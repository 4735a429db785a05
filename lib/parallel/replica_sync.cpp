#include "parallel/replica_sync.h"

#include <fmt/format.h>

namespace gputrain {

void ReplicaSync::add(Communicator* group, const std::vector<NamedTensor>& named,
                      const std::vector<NamedTensor>& trainable) {
  Replicas& r = sets_.emplace_back();
  r.group = group;
  r.params = trainable;
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

std::function<void(bool)> ReplicaSync::backward_hook() {
  bool any = false;
  for (const Replicas& r : sets_) any = any || r.sync != nullptr;
  if (!any) return {};
  return [this](bool last) {
    for (Replicas& r : sets_)
      if (r.sync) r.sync->prepare_backward(last);
  };
}

void ReplicaSync::finish_backward() {
  for (Replicas& r : sets_)
    if (r.sync) r.sync->finish();
}

void ReplicaSync::after_optimizer_step() {
  if (zero_ == 0) return;
  for (Replicas& r : sets_)
    if (r.sync) broadcast_from_owners(*r.group, r.params, r.owners);
}

std::optional<GradSyncTimes> ReplicaSync::grad_sync_times() const {
  if (sets_.empty() || !sets_.front().sync) return std::nullopt;
  const GradientSync& dense = *sets_.front().sync;
  GradSyncTimes t;
  t.buckets = dense.bucket_count();
  t.backward_end_s = dense.last_backward_end_s();
  for (const auto& e : dense.last_step_events()) t.bucket_start_s.push_back(e.launched_s);
  return t;
}

std::string ReplicaSync::describe_buckets() const {
  if (sets_.empty() || !sets_.front().sync) return "";
  return fmt::format("{} gradient bucket(s) of up to {:g} MiB", sets_.front().sync->bucket_count(), bucket_mb_);
}

}  // namespace gputrain
