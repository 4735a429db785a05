// Optimizer state saved under one tensor-parallel degree, taken by a run under another: each tp
// rank's state of a split parameter is joined whole (as the weights are), then cut as this run
// splits the parameter. Elementwise state (AdamW's moments, Lion's and SGD's momentum) reshards
// exactly; state that is not (Adafactor's row and column statistics, adamw8bit's quantization
// blocks of a split parameter) differs between tp ranks and is refused by name.
#pragma once
#include <string>
#include <vector>

#include "parallel/tensor_shard.h"
#include "util/named_tensor.h"

namespace gputrain {

// `saved[r]`: tp rank r's state ("<parameter>.<slot>") under `saved_split`; `whole_model`: the
// parameters at their whole shapes (only the shapes are read: a model built on meta gives them).
// Returns rank `rank` of `size`'s state under `split`. Throws a DataError naming the tensor and
// `checkpoint` where a state tensor cannot be resharded.
std::vector<NamedTensor> reshard_tp_state(const std::vector<std::vector<NamedTensor>>& saved,
                                          const std::vector<TensorShard>& saved_split,
                                          const std::vector<NamedTensor>& whole_model,
                                          const std::vector<TensorShard>& split, int rank, int size,
                                          const std::string& checkpoint);

}  // namespace gputrain
