// Weights between ours and a Hugging Face model's, driven by the architecture's table
// (HfMapping::tensors, model/architecture.h): export writes each Hugging Face tensor from ours
// (bands of rows split out, GPT-2's Conv1D transposed, the vocabulary's padding rows cut);
// import takes a file's tensors one at a time into the model's parameters, so a sharded
// checkpoint is read one shard at a time, with shape and completeness checks whose errors name
// the recipe key to change.
#pragma once
#include <nlohmann/json.hpp>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "config/settings.h"
#include "model/hf_tensor.h"
#include "util/named_tensor.h"

namespace gputrain {

// Our weights `ours` (module_weights of a plain model) as the Hugging Face model's tensors, in
// `dtype` on the CPU.
std::vector<NamedTensor> to_hf_tensors(const std::vector<NamedTensor>& ours, const ModelSettings& m,
                                       torch::ScalarType dtype);

class HfWeightImport {
 public:
  // `targets`: the parameters to fill, by our name (a LoRA model's base only). `source` names
  // model.init_from in messages.
  HfWeightImport(const ModelSettings& m, std::map<std::string, torch::Tensor> targets, std::string source);
  // One tensor of `file`: copied (dtype and device converted) into its place.
  void take(const std::string& name, const torch::Tensor& t, const std::string& file);
  // DataError unless every weight came.
  void finish() const;

 private:
  const ModelSettings& m_;
  std::map<std::string, torch::Tensor> targets_;
  std::string source_, family_, fix_;
  std::map<std::string, HfTensor> table_;  // by Hugging Face name
  std::set<std::string> done_;
};

// The bos/eos token ids exported models name when nothing better is known: GPT-2's end-of-text
// when the vocabulary has it (our built-in tokenizer is GPT-2's), else null.
nlohmann::ordered_json gpt2_eot_id(const ModelSettings& m);

}  // namespace gputrain
