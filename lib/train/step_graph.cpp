#include "train/step_graph.h"

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

}  // namespace gputrain
