// Data parallelism applied from outside the model (DESIGN rule 1): every rank
// holds the model, trains on its own share of each global batch, and the
// gradients are summed across ranks during backward.
//
// GradientSync hooks each parameter's gradient accumulator. Parameters are
// grouped, in the order backward produces their gradients (the reverse of
// registration), into buckets of about parallel.bucket_mb; when the last
// gradient of a bucket is accumulated, the bucket is flattened and its
// reduction starts at once, so communication overlaps the rest of backward.
// Non-final micro-batches of gradient accumulation send nothing.
//
// ZeRO (parallel.zero) splits the parameters into one contiguous run per rank
// (balanced by size); a rank's optimizer holds state for its own run only.
// Stage 1 all-reduces gradients; stage 2 reduces each bucket to its owner
// only (buckets never span owners), and other ranks drop those gradients.
// After the update each owner broadcasts its parameters.
#pragma once
#include <torch/types.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <vector>

#include "parallel/communicator.h"
#include "util/named_tensor.h"

namespace gputrain {

// Owner rank of each tensor: `parts` contiguous runs of about equal total size.
std::vector<int> partition_contiguous(const std::vector<int64_t>& sizes, int parts);

// Gradients become ready in roughly reverse registration order; buckets and
// ZeRO ownership follow that order.
std::vector<NamedTensor> in_gradient_order(const std::vector<NamedTensor>& params);

struct BucketEvent {
  double launched_s;  // seconds since the sync's epoch (the start of the step)
  int64_t bytes;
};

class GradientSync {
 public:
  // `params` in gradient order. `owners` empty: all-reduce; else ZeRO-2's reduce to owners[i].
  GradientSync(Communicator& comm, std::vector<NamedTensor> params, double bucket_mb, std::vector<int> owners);
  ~GradientSync();
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  // Before each micro-batch's backward: only the last one sends.
  void prepare_backward(bool sends);
  // After the last backward: waits for every bucket and writes the sums back
  // into .grad. Under ZeRO-2 the gradients of other ranks' parameters are freed.
  void finish();

  int64_t bucket_count() const { return static_cast<int64_t>(buckets_.size()); }
  // When each bucket of the last step started reducing, measured from prepare_backward(true).
  const std::vector<BucketEvent>& last_step_events() const { return events_; }
  // When backward ended (finish() was called) in the last step, on the same clock.
  double last_backward_end_s() const { return backward_end_s_; }
  double seconds_since_epoch() const;

 private:
  struct Bucket {
    std::vector<size_t> members;  // indices into params_
    int64_t numel = 0;
    int owner = -1;  // ZeRO-2 reduce root; -1 = all-reduce
    torch::Tensor flat;
    PendingCollective pending;
    size_t ready = 0;
  };
  void on_gradient_ready(size_t param_index);
  void launch(Bucket& b, size_t bucket_index);

  Communicator& comm_;
  std::vector<NamedTensor> params_;
  std::vector<size_t> bucket_of_;  // param index -> bucket
  std::vector<Bucket> buckets_;
  std::vector<std::shared_ptr<void>> accumulators_;  // keeps the hooked autograd nodes alive
  std::vector<uintptr_t> hook_keys_;
  std::vector<char> seen_;  // this backward: has the parameter's gradient arrived?
  bool sending_ = false;
  std::mutex mu_;  // hooks may run on autograd's device threads
  std::chrono::steady_clock::time_point epoch_;
  std::vector<BucketEvent> events_;
  size_t first_launched_ = 0;  // this step's first bucket
  double backward_end_s_ = 0;
};

// Rank 0's parameter values to every rank (the start of a run). Parameters away from the group's
// tensor device (a model built on the host under ZeRO-3, over NCCL) pass through it one at a time.
void broadcast_parameters(Communicator& comm, const std::vector<NamedTensor>& params);

// ZeRO: each owner's updated parameters to every rank (one flat broadcast per owner).
void broadcast_from_owners(Communicator& comm, const std::vector<NamedTensor>& params, const std::vector<int>& owners);

}  // namespace gputrain
