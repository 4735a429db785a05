#include "optim/optimizer_placement.h"

namespace gputrain {

OptimizerPlacement optimizer_placement(const ParallelSettings& p, torch::Device device, const std::string& output_dir,
                                       bool device_named_cpu) {
  OptimizerPlacement where;
  const bool cuda = device.is_cuda();
  if (p.offload_optimizer == OptimizerOffload::kCpu && cuda) where.state = OptimizerPlacement::State::kHost;
  if (p.offload_optimizer == OptimizerOffload::kNvme) {  // (validation: zero 3)
    where.state = OptimizerPlacement::State::kFile;
    where.file_dir = p.offload_dir.empty() ? output_dir : p.offload_dir;
  }
  where.shards_on_host = (p.offload_params || p.offload_optimizer == OptimizerOffload::kNvme) && cuda;
  if (!cuda && !device_named_cpu) {
    if (p.offload_optimizer == OptimizerOffload::kCpu)
      where.notices.push_back(
          "parallel.offload_optimizer has no effect on the CPU (the optimizer state is there already)");
    if (p.offload_params)
      where.notices.push_back("parallel.offload_params has no effect on the CPU (the shards are there already)");
  }
  return where;
}

}  // namespace gputrain
