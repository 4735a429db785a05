// Ranks as threads of the test process, over Gloo on loopback: what the
// tensor-, pipeline- and expert-parallel tests share to compare n ranks with one process.
#pragma once
#include <torch/types.h>

#include <stdlib.h>

#include <algorithm>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/launcher.h"

namespace gputrain::test {

// Runs rank_main(rank) for ranks 0..size-1, each on its own thread (rank 0 on the caller's). A rank
// that throws unwinds (closing its groups, so its peers fail too); every thread is joined and the
// first exception is rethrown here, failing the test case rather than aborting the test binary.
inline void run_ranks_as_threads(int size, const std::function<void(int rank)>& rank_main) {
  // Torch's flight recorder, one process-wide log of every group's collectives, is not safe for
  // groups used from several threads at once (it crashed 1 run in ~15): ranks as threads turn it
  // off before the first group exists (real ranks are processes, each with its own).
  setenv("TORCH_FR_BUFFER_SIZE", "0", 1);
  std::mutex first_lock;
  std::exception_ptr first;
  auto guarded = [&](int rank) {
    try {
      rank_main(rank);
    } catch (...) {
      std::lock_guard<std::mutex> lock(first_lock);
      if (!first) first = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  for (int r = 1; r < size; ++r) threads.emplace_back(guarded, r);
  guarded(0);
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

// Runs body(rank, world) on `size` threads, each joined to one world.
inline void run_thread_ranks(int size, const std::function<void(int rank, Communicator& world)>& body) {
  const int port = free_tcp_port();
  run_ranks_as_threads(size, [&](int rank) {
    World w;
    w.rank = rank;
    w.size = w.local_size = size;
    w.local_rank = rank;
    w.master_port = port;
    w.source = "test";
    Communicator world(w, CommBackend::kGloo, torch::kCPU, 60);
    body(rank, world);
  });
}

// A group of every rank of `world` (the subgroup code path, as a grid's groups take).
inline std::unique_ptr<Communicator> whole_group(const Communicator& world, const std::string& name) {
  std::vector<int> all;
  for (int r = 0; r < world.size(); ++r) all.push_back(r);
  return world.subgroup(all, name);
}

// ||a - b|| / ||b||.
inline double relative_error(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).norm().item<double>() / std::max(b.norm().item<double>(), 1e-30);
}

}  // namespace gputrain::test
