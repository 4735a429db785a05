// Builds the optimizer a recipe names (optim.name) with the update kernel
// optim.impl asks for, falling back with a notice where that kernel does not
// exist (each optimizer's spec says which it has: optim/optimizer_spec.h).
// Also estimates the optimizer's state size from parameter shapes alone.
#pragma once
#include <torch/nn/module.h>

#include <memory>
#include <optional>
#include <string>

#include "config/settings.h"
#include "model/gpt_shapes.h"
#include "optim/optimizer.h"
#include "optim/optimizer_placement.h"

namespace gputrain {

struct KernelChoice {
  UpdateKernel kernel;
  std::string notice;  // non-empty when optim.impl could not be honoured
};
KernelChoice choose_kernel(OptimName name, OptimImpl impl, const torch::Device& device);

// The groups' parameters must share one device. Logs the notice, if any. `sharding`: the
// parameters are ZeRO-3 shards (optim/optimizer.h RowSharding), for the optimizers that need to know.
// `matrices`: the matrices tp or ZeRO-3 split over ranks (optim/optimizer.h MatrixSharding).
std::unique_ptr<Optimizer> make_optimizer(std::vector<ParamGroup> groups, const OptimSettings& o,
                                          std::optional<RowSharding> sharding = std::nullopt,
                                          std::optional<MatrixSharding> matrices = std::nullopt);
// The same in `placement`: in memory as above; over host copies (optim/host_offloaded_optimizer.h);
// or with its state in a file, a unit at a time (optim/streamed_optimizer.h). The step, the log and
// checkpoints then use it as any optimizer.
std::unique_ptr<Optimizer> make_optimizer(std::vector<ParamGroup> groups, const OptimSettings& o,
                                          const std::optional<RowSharding>& sharding,
                                          const std::optional<MatrixSharding>& matrices,
                                          const OptimizerPlacement& placement);
std::unique_ptr<Optimizer> make_optimizer(const torch::nn::Module& model, const OptimSettings& o);

// Bytes of optimizer state for parameters of these shapes (fp32 or bf16
// parameters alike: moments are fp32), matching Optimizer::state_bytes().
int64_t estimate_state_bytes(const OptimSettings& o, const std::vector<ParamShape>& params);

// How the estimate is made, for `gputrain plan` ("2 fp32 moments = 8 bytes x parameters").
std::string optimizer_state_rule(const OptimSettings& o);

// "adamw" etc. as written in recipes.
std::string optim_name(OptimName name);

}  // namespace gputrain
