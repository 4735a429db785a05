#include "train/expert_balance.h"

#include <ATen/ATen.h>

#include "checkpoint/expert_biases.h"
#include "model/mixture_loads.h"
#include "model/moe.h"
#include "parallel/process_groups.h"

namespace gputrain {
void forget_expert_loads(Gpt& model) {
  if (model->moe) model->moe->reset_stats();
  for (auto& [block, layer] : model->mixture_layers()) layer->take_step_load(), layer->take_line_load();
}

ExpertBalance::ExpertBalance(Gpt& model, torch::Device device)
    : device_(device), rate_(model->cfg.moe.bias_rate), experts_(model->cfg.moe.experts) {
  for (int64_t b = 0; b < model->cfg.n_layer; ++b)
    if (model->cfg.moe.is_moe_block(b)) bias_[b] = torch::zeros({experts_}, torch::kFloat);
  set_into(model);
}

void ExpertBalance::set_into(Gpt& model) const {
  for (auto& [block, layer] : model->mixture_layers()) layer->expert_bias = bias_.at(block).to(device_);
}

void ExpertBalance::after_step(Gpt& model, const ProcessGroups& groups, bool moved) {
  // Every layer's loads (in block order, as bias_), summed over the world.
  std::vector<double> loads =
      groups.sum_over_world(mixture_loads(model, [](MoeMlpImpl& layer) { return layer.take_step_load(); }),
                            "the mixture layers' expert loads (model.moe.balance: bias)");
  if (!moved) return;  // a skipped step's update (fp16 overflow, nan, spike) leaves the biases too
  size_t slot = 0;
  for (auto& [block, bias] : bias_) {
    const torch::Tensor load = torch::from_blob(loads.data() + slot, {experts_}, torch::kDouble).clone();
    move_expert_bias(bias, load, rate_);
    slot += static_cast<size_t>(experts_);
  }
  set_into(model);
}

nlohmann::json ExpertBalance::state() const { return expert_biases_json(bias_); }

void ExpertBalance::restore(const nlohmann::json& saved, Gpt& model, const std::string& checkpoint) {
  if (saved.is_null()) return;
  bias_ = read_expert_biases(saved, model->cfg, checkpoint,
                             "resume with the checkpoint's model.moe settings, or from another checkpoint");
  set_into(model);
}

}  // namespace gputrain
