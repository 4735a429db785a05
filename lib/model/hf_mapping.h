// What the architectures' Hugging Face mappings (model/arch_*.cpp) share:
// fitting weights that carry our names to a model (padded vocabulary rows, a
// shorter position table, shape and leftover checks with errors that name the
// recipe key to change), the vocabulary rows cut on export, and the
// config.json checks.
#pragma once
#include <nlohmann/json.hpp>
#include <map>
#include <string>
#include <vector>

#include "config/settings.h"
#include "util/named_tensor.h"

namespace gputrain {

// Our weight as exported: float32 on the CPU, the embedding/head's padding rows (ours alone) cut.
torch::Tensor exported_tensor(const std::string& name, const torch::Tensor& t, const ModelSettings& m);

// `given` (file tensors already renamed to ours) as `current`'s list: every
// weight of `current` must be there with its shape, except that the vocabulary
// matrices may have model.vocab_size rows (our padding rows keep their values)
// and the position table may be longer than model.seq_len (cut). Anything left
// in `given` is an error. `fix_shapes` ends each shape error.
std::vector<NamedTensor> fit_to_model(std::map<std::string, torch::Tensor> given,
                                      const std::vector<NamedTensor>& current, const ModelSettings& m,
                                      const std::string& source, const std::string& family,
                                      const std::string& fix_shapes);

// config.json checks; each throws a DataError naming `recipe_key` and its fix.
void check_config_model_type(const nlohmann::json& config, const ModelSettings& m, const std::string& source);
void check_config_int(const nlohmann::json& config, const char* key, const char* recipe_key, int64_t ours,
                      const std::string& source);
void check_config_bool(const nlohmann::json& config, const char* key, const char* recipe_key, bool ours,
                       const std::string& source);
void check_config_float(const nlohmann::json& config, const char* key, const char* recipe_key, double ours,
                        const std::string& source);

// GPT-2's end-of-text id when the vocabulary has it (our tokenizer is GPT-2's), else null.
nlohmann::ordered_json gpt2_eot_id(const ModelSettings& m);

}  // namespace gputrain
