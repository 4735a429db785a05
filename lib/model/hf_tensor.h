// One tensor of a Hugging Face model and where it lives in ours: a whole parameter, or a band of
// its rows (Llama's q_proj, k_proj and v_proj are the rows of our fused attn.c_attn).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace gputrain {

struct HfTensor {
  std::string hf;                    // its name in the Hugging Face model
  std::string ours;                  // our parameter; empty = a tensor ours lacks that must be all zero
  int64_t row_offset = 0, rows = 0;  // rows [row_offset, row_offset + rows) of ours; rows 0 = all of it
  bool transposed = false;           // stored [in, out] (GPT-2's Conv1D)
  std::vector<int64_t> zero_shape;   // its shape, for a tensor ours lacks
};

}  // namespace gputrain
