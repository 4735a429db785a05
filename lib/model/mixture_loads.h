// The expert loads of every mixture layer of the whole model in one vector, for a sum over ranks
// (the metrics' load balance, the routing biases' updates): under pipeline parallelism each stage
// fills its own layers' places, so the world sum holds every layer's.
#pragma once
#include <torch/types.h>

#include <functional>
#include <vector>

#include "model/gpt.h"

namespace gputrain {

// model.moe.experts values per mixture layer of the model's config, in block order: `take` of the
// layer where this process holds it (a layer's step or line load), zeros where another stage does.
std::vector<double> mixture_loads(const Gpt& model, const std::function<torch::Tensor(MoeMlpImpl&)>& take);

}  // namespace gputrain
