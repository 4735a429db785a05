#include "model/mixture_loads.h"

#include "model/moe.h"

namespace gputrain {

std::vector<double> mixture_loads(const Gpt& model, const std::function<torch::Tensor(MoeMlpImpl&)>& take) {
  const int64_t experts = model->cfg.moe.experts;
  auto layers = model->mixture_layers();
  std::vector<double> loads;
  for (int64_t b = 0; b < model->cfg.n_layer; ++b) {
    if (!model->cfg.moe.is_moe_block(b)) continue;
    auto it = layers.find(b);
    const torch::Tensor load = it == layers.end() ? torch::zeros({experts}, torch::kDouble)
                                                  : take(*it->second).to(torch::kCPU, torch::kDouble).contiguous();
    loads.insert(loads.end(), load.data_ptr<double>(), load.data_ptr<double>() + experts);
  }
  return loads;
}

}  // namespace gputrain
