// Loading a module's parameters (util/named_tensor.h: module_weights) back with every
// name and shape checked: a checkpoint of another model is refused before
// anything is copied, with the first differences named.
#pragma once
#include <torch/nn/module.h>

#include <functional>
#include <string>
#include <vector>

#include "util/named_tensor.h"

namespace gputrain {

// Copies `weights` into m's parameters (converting dtype and device). Every
// parameter must be present with its shape and nothing else may be; a
// mismatch is a DataError naming `source`, the keys and `fix`. With `covers`,
// only the parameters it accepts are loaded (and expected): a LoRA model's
// base from model.init_from, its adapters from an adapters-only checkpoint.
void load_module_weights(torch::nn::Module& m, const std::vector<NamedTensor>& weights, const std::string& source,
                         const std::string& fix, const std::function<bool(const std::string&)>& covers = {});

// "a, b, c, d and 4 more": the first names of a list, for messages.
std::string first_names(const std::vector<std::string>& names);

}  // namespace gputrain
