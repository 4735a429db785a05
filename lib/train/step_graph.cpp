#include "train/step_graph.h"

#include <spdlog/spdlog.h>

#include "util/error.h"

namespace gputrain {

#ifndef GPUTRAIN_WITH_CUDA  // else in step_graph_cuda.cpp
std::unique_ptr<StepGraph> make_step_graph(torch::Device, std::vector<torch::Tensor>, const ObjectiveSpec&) {
  throw config_error(
      "kernels.cuda_graphs: this gputrain was built without its CUDA code paths (GPUTRAIN_CUDA=OFF, or "
      "no nvcc at build time)\n    fix: rebuild with nvcc and LibTorch's CUDA libraries present "
      "(scripts/build.sh), or set kernels.cuda_graphs: false");
}
#endif

std::unique_ptr<StepGraph> step_graph_for(bool cuda_graphs, bool named_cpu, torch::Device device,
                                          std::vector<torch::Tensor> params, const ObjectiveSpec& objective) {
  if (!cuda_graphs) return nullptr;
  if (!device.is_cuda()) {
    if (!named_cpu) spdlog::warn("kernels.cuda_graphs has no effect on the CPU: training without CUDA graphs");
    return nullptr;
  }
  spdlog::info(
      "kernels.cuda_graphs: each step's forward and backward are captured as a CUDA graph after {} eager steps, "
      "then replayed",
      StepGraph::kWarmupSteps);
  return make_step_graph(device, std::move(params), objective);
}

}  // namespace gputrain
