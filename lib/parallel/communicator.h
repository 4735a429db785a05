// The collectives a multi-process run needs, over LibTorch's c10d backends
// (Gloo on the CPU, NCCL on CUDA) after a TCPStore rendezvous at
// MASTER_ADDR:MASTER_PORT (rank 0 hosts the store; under torchrun, its agent). Never a home-made transport.
//
// Failures are gputrain errors that name the collective and the peer: every
// rank beats a heartbeat counter in the store, and when a collective fails or
// outlives parallel.timeout_s the rank looks for peers whose heartbeat stopped.
//
// subgroup() makes a communicator over some of the world's ranks (a grid's
// tp, dp or pp group) that shares the world's store and heartbeats; its
// rank() and size() and the ranks its collectives take are the group's.
#pragma once
#include <torch/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config/settings.h"
#include "parallel/world.h"

namespace gputrain {

class Communicator;

// A collective in flight; wait() finishes it (or throws a gputrain error).
class PendingCollective {
 public:
  PendingCollective() = default;
  PendingCollective(std::shared_ptr<void> work, const Communicator* comm, std::string what)
      : work_(std::move(work)), comm_(comm), what_(std::move(what)) {}
  void wait();
  bool valid() const { return work_ != nullptr; }

 private:
  std::shared_ptr<void> work_;  // holds a c10d::Work (kept out of this header: c10d's headers are heavy)
  const Communicator* comm_ = nullptr;
  std::string what_;
};

class Communicator {
 public:
  // Joins the world: waits (up to timeout_s) for every rank at the rendezvous.
  // `backend` kAuto picks NCCL for a CUDA device and Gloo otherwise.
  Communicator(const World& world, CommBackend backend, torch::Device device, double timeout_s);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }  // in this communicator's group (the world's for the world)
  int size() const { return static_cast<int>(ranks_.size()); }
  const World& world() const { return world_; }
  int world_rank(int group_rank) const { return ranks_[static_cast<size_t>(group_rank)]; }
  // A communicator over `world_ranks` (this process among them), named in errors. Every member
  // must create it, and members create their groups in the same order.
  std::unique_ptr<Communicator> subgroup(const std::vector<int>& world_ranks, const std::string& name) const;
  std::string backend_name() const;
  // Where tensors handed to the collectives must live: the current GPU for NCCL, else the CPU.
  torch::Device tensor_device() const;
  double timeout_s() const { return timeout_s_; }

  // In place; `what` names the operation in errors ("gradient bucket 3").
  PendingCollective all_reduce_sum(torch::Tensor& t, const std::string& what);
  PendingCollective reduce_sum(torch::Tensor& t, int root, const std::string& what);
  PendingCollective broadcast(torch::Tensor& t, int root, const std::string& what);
  // Every rank's `in` (equal sizes) into `out`, in rank order: out holds size() * in.numel() values.
  PendingCollective all_gather(torch::Tensor& out, torch::Tensor& in, const std::string& what);
  // The sum over ranks of `in` (size() equal parts, in rank order), this rank's part into `out`.
  PendingCollective reduce_scatter_sum(torch::Tensor& out, torch::Tensor& in, const std::string& what);
  // Point to point (gathering sharded optimizer state for a checkpoint).
  PendingCollective send(torch::Tensor& t, int dst, int tag, const std::string& what);
  PendingCollective recv(torch::Tensor& t, int src, int tag, const std::string& what);
  // Rows of `in` to every rank: in_splits[r] rows (dim 0) go to rank r, and
  // out_splits[r] rows come from it into `out`, in rank order (expert parallelism).
  PendingCollective all_to_all(torch::Tensor& out, torch::Tensor& in, const std::vector<int64_t>& out_splits,
                               const std::vector<int64_t>& in_splits, const std::string& what);

  // Blocking conveniences; a tensor on another kind of device than tensor_device() travels through
  // a copy there (host tensors under NCCL: ZeRO-3's offloaded shards' norms and statistics).
  void all_reduce_sum_now(torch::Tensor& t, const std::string& what);
  void broadcast_now(torch::Tensor& t, int root, const std::string& what);

  // Turns a backend failure into an error naming `what` and the peers that stopped responding.
  [[noreturn]] void fail(const std::string& what, const std::string& cause) const;

 private:
  struct Shared;  // the store and the heartbeat, one per process
  struct Impl;
  Communicator(std::shared_ptr<Shared> shared, const World& world, std::vector<int> ranks, std::string name,
               CommBackend backend, torch::Device device, double timeout_s);
  void connect();  // this group's backend (backend_, device_) over the shared store
  // Runs `collective` on `t` and waits, through a copy on tensor_device() when `t` is elsewhere.
  void run_now(torch::Tensor& t, const std::function<PendingCollective(torch::Tensor&)>& collective);
  std::shared_ptr<Shared> shared_;
  std::unique_ptr<Impl> impl_;
  World world_;
  std::vector<int> ranks_;  // world ranks of the group, in group-rank order
  int rank_ = 0;
  std::string name_;  // "" for the world
  CommBackend backend_;
  torch::Device device_;
  double timeout_s_;
};

}  // namespace gputrain
