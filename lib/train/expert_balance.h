// model.moe.balance: bias (DeepSeek-V3's auxiliary-loss-free balancing) through a run: after each step
// the mixture layers' expert loads, summed over every rank, move each layer's routing bias (model/moe.h
// move_expert_bias). Every rank keeps every layer's bias, a pipeline stage's others included (the
// loads of all layers travel in one all-reduce), so rank 0's checkpoint holds them all and a resumed
// run continues exactly.
#pragma once
#include <nlohmann/json.hpp>

#include <map>

#include "model/gpt.h"

namespace gputrain {

class ProcessGroups;

// Drops the mixture layers' counts of forwards that were not training steps (the batch finder's trials).
void forget_expert_loads(Gpt& model);

class ExpertBalance {
 public:
  // Every mixture layer's bias at zero, set into the model's (on `device`).
  ExpertBalance(Gpt& model, torch::Device device);
  // After each step, on every rank: the step's loads summed over the world (a collective); where the
  // step's update was applied (`moved`), each bias moves and the model's are set.
  void after_step(Gpt& model, const ProcessGroups& groups, bool moved);
  // trainer.json's "moe_expert_bias": each mixture layer's bias by block ("transformer.h.1.mlp").
  nlohmann::json state() const;
  // A checkpoint's biases (null: saved without this balancing, so they start at zero); a data error naming
  // `checkpoint` when its layers or experts are not this model's.
  void restore(const nlohmann::json& saved, Gpt& model, const std::string& checkpoint);

 private:
  void set_into(Gpt& model) const;
  torch::Device device_;
  double rate_;
  int64_t experts_;
  std::map<int64_t, torch::Tensor> bias_;  // by block: float32 [experts] on the CPU
};

}  // namespace gputrain
