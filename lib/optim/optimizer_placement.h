// Where a run's optimizer state and update live: parallel.offload_optimizer and parallel.offload_params
// read once, here. make_optimizer (optim/make_optimizer.h) builds the optimizer in its place, so the
// step, the log and checkpoints see one Optimizer whatever the placement.
//   memory: beside the parameters;
//   host:   a CUDA run's state and update on the CPU over pinned copies of the parameters
//           (optim/host_offloaded_optimizer.h);
//   file:   ZeRO-3's state (and fp32 shards) in a file, streamed a unit at a time (optim/streamed_optimizer.h).
#pragma once
#include <torch/types.h>

#include <map>
#include <string>
#include <vector>

#include "config/settings.h"

namespace gputrain {

struct OptimizerPlacement {
  enum class State { kMemory, kHost, kFile };
  State state = State::kMemory;
  // ZeRO-3 on CUDA: the shards, their gradients and the state in host memory (offload_params, or
  // implied by a file: the file's update runs on the host).
  bool shards_on_host = false;
  std::string file_dir;              // kFile: the folder of each rank's file (parallel.offload_dir)
  std::vector<std::string> notices;  // keys that do nothing on this device, to warn about
  // kFile under ZeRO-3 (parallel/parallelize.h fills them): the parameter names of each unit, in the
  // step's order, and by name the lower-precision copies that stay in memory for the gathers.
  std::vector<std::vector<std::string>> units;
  std::map<std::string, torch::Tensor> copies;
};

// The placement `p` asks for on `device`; `output_dir`: where the file goes without parallel.offload_dir.
// `device_named_cpu`: run.device says cpu (validation warns about the keys then; no notice here).
OptimizerPlacement optimizer_placement(const ParallelSettings& p, torch::Device device, const std::string& output_dir,
                                       bool device_named_cpu);

}  // namespace gputrain
