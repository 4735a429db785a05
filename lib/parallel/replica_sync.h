// Keeps the replicas of the model's parameters equal: data parallelism and ZeRO over the groups
// that hold the same parameters (the dp group for the dense ones; under expert parallelism, for
// each expert, the ranks holding it). At the start the group's rank 0 sends its weights to the
// others; gradients are reduced during backward (GradientSync, parallel/data_parallel.h); ZeRO
// (parallel.zero) decides which rank updates which parameters, and owners broadcast after the update.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "metrics/parallel_reports.h"
#include "parallel/communicator.h"
#include "parallel/data_parallel.h"
#include "util/named_tensor.h"

namespace gputrain {

class ReplicaSync {
 public:
  ReplicaSync(int64_t zero, double bucket_mb) : zero_(zero), bucket_mb_(bucket_mb) {}

  // One set of replicated parameters: `group` (null: this rank is their only holder), `named` every
  // one of them (frozen ones included, as broadcast), `trainable` those with gradients, in gradient order.
  // Called for the dense parameters first, then the experts': every rank in the same order.
  void add(Communicator* group, const std::vector<NamedTensor>& named, const std::vector<NamedTensor>& trainable);

  // Names of the parameters this rank updates under ZeRO (all it holds without ZeRO: empty).
  const std::set<std::string>& owned() const { return owned_; }
  // Before each micro-batch's backward, with whether it is the last; empty when nothing is reduced.
  std::function<void(bool last)> backward_hook();
  // Waits for the gradient reductions.
  void finish_backward();
  // ZeRO: owners broadcast their updated parameters.
  void after_optimizer_step();
  // The dense gradients' reductions in the last step; none when they are not reduced.
  std::optional<GradSyncTimes> grad_sync_times() const;
  // For the log: "N gradient bucket(s) of up to M MiB", or empty when nothing is reduced.
  std::string describe_buckets() const;

 private:
  struct Replicas {
    Communicator* group = nullptr;
    std::vector<NamedTensor> params;  // trainable, in gradient order
    std::vector<int> owners;          // ZeRO: the group rank that updates params[i]
    std::unique_ptr<GradientSync> sync;
  };
  int64_t zero_;
  double bucket_mb_;
  std::vector<Replicas> sets_;  // the dense parameters', then the experts' (ep > 1)
  std::set<std::string> owned_;
};

}  // namespace gputrain
