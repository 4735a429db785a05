// trainer.json's "moe_expert_bias" (model.moe.balance: bias): each mixture layer's routing bias by the
// layer's name ("transformer.h.1.mlp"), written by a run and read back by a resume, a spike rollback and
// gputrain eval / generate.
#pragma once
#include <nlohmann/json.hpp>
#include <torch/types.h>

#include <map>
#include <string>

#include "config/settings.h"

namespace gputrain {

// The biases by block (float32 [experts] each) as trainer.json keeps them.
nlohmann::json expert_biases_json(const std::map<int64_t, torch::Tensor>& bias);

// `saved`'s bias of every mixture layer of `m`, by block; a data error naming `checkpoint` and `fix` when
// its layers or experts are not m's.
std::map<int64_t, torch::Tensor> read_expert_biases(const nlohmann::json& saved, const ModelSettings& m,
                                                    const std::string& checkpoint, const std::string& fix);

}  // namespace gputrain
