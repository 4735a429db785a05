// Ranks as threads of the test process, over Gloo on loopback: what the
// tensor-, pipeline- and expert-parallel tests share to compare n ranks with one process.
#pragma once
#include <torch/types.h>

#include <stdlib.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/launcher.h"

namespace gputrain::test {

// Runs body(rank, world) on `size` threads (rank 0 on the caller's), each joined to one world.
inline void run_thread_ranks(int size, const std::function<void(int rank, Communicator& world)>& body) {
  // Torch's flight recorder, one process-wide log of every group's collectives, is not safe for
  // groups used from several threads at once (it crashed 1 run in ~15): ranks as threads turn it
  // off before the first group exists (real ranks are processes, each with its own).
  setenv("TORCH_FR_BUFFER_SIZE", "0", 1);
  const int port = free_tcp_port();
  auto rank_main = [&](int rank) {
    World w;
    w.rank = rank;
    w.size = w.local_size = size;
    w.local_rank = rank;
    w.master_port = port;
    w.source = "test";
    Communicator world(w, CommBackend::kGloo, torch::kCPU, 60);
    body(rank, world);
  };
  std::vector<std::thread> threads;
  for (int r = 1; r < size; ++r) threads.emplace_back(rank_main, r);
  rank_main(0);
  for (auto& t : threads) t.join();
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
