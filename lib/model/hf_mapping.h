// Weights between ours and a Hugging Face model's, driven by the architecture's table
// (HfMapping::tensors, model/architecture.h): export writes each Hugging Face tensor from ours
// (bands of rows split out, GPT-2's Conv1D transposed, the vocabulary's padding rows cut);
// import takes a file's tensors one at a time into the model's parameters, so a sharded
// checkpoint is read one shard at a time, with shape and completeness checks whose errors name
// the recipe key to change.
#pragma once
#include <nlohmann/json.hpp>
#include <map>
#include <optional>
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

// Where one tensor of a Hugging Face file goes in ours: its stored element (i, j) (a tensor of more
// dimensions seen as [its first, the rest]) is our element (row_offset + i, j), or, transposed,
// (row_offset + j, i); only `rows` of our rows come from it (a longer position table's first ones).
struct HfPlacement {
  std::string ours;
  int64_t row_offset = 0, rows = 0;
  bool transposed = false;
};

class HfWeightImport {
 public:
  // `targets`: the whole shapes of the parameters to fill, by our name (a LoRA model's base only).
  // `source` names model.init_from in messages.
  HfWeightImport(const ModelSettings& m, std::map<std::string, std::vector<int64_t>> targets, std::string source);
  // Where the tensor `name` of `shape` in `file` goes; nullopt for one ours passes over (a buffer, a
  // tied head written out) or lacks (a bias: `must_be_zero` is set, check it with check_zero).
  // DataError for a tensor this model lacks, one in two files, or a shape that is not ours.
  std::optional<HfPlacement> place(const std::string& name, at::IntArrayRef shape, const std::string& file,
                                   bool& must_be_zero);
  // DataError unless `t`, the tensor `name` of `file` that place said ours lacks, is all zero.
  void check_zero(const std::string& name, const torch::Tensor& t, const std::string& file) const;
  // DataError unless every weight came.
  void finish() const;

 private:
  const ModelSettings& m_;
  std::map<std::string, std::vector<int64_t>> targets_;
  std::string source_, family_, fix_;
  std::map<std::string, HfTensor> table_;  // by Hugging Face name
  std::set<std::string> done_;
};

// The bos/eos token ids exported models name when nothing better is known: GPT-2's end-of-text
// when the vocabulary has it (our built-in tokenizer is GPT-2's), else null.
nlohmann::ordered_json gpt2_eot_id(const ModelSettings& m);

}  // namespace gputrain
