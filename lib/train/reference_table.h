// train.preference.reference: precomputed: the reference model's log-probabilities of every pair of
// a source, computed once before training and stored beside the run, in
// <output_dir>/reference_logps/<name>.bin (float32 [pairs, 2]: chosen, rejected) and .json (the
// pairs' file and CRC-32C, their count). A resumed run reads the table back when it is of the same
// pairs, and computes it again (saying so) when the data changed. The pass records its progress round
// by round (<name>.partial.bin/.json): one stopped or killed goes on from there when the run starts
// again in its folder.
#pragma once
#include <torch/types.h>

#include <filesystem>
#include <string>

#include "data/preference_pairs.h"
#include "parallel/process_groups.h"
#include "train/reference_model.h"

namespace gputrain {

struct ReferenceTableOptions {
  std::filesystem::path dir;  // <output_dir>/reference_logps
  std::string name;           // train | eval
  int64_t seq_len = 0;
  int64_t batch = 1;  // pairs a forward
  torch::Device device = torch::kCPU;
  bool lead = false;  // this rank writes the files
};

// The table of `pairs`: read from o.dir when it is theirs, else computed with `live` (each
// data-parallel replica a share of the pairs, summed over the world) and written by the lead rank.
torch::Tensor reference_table(const PreferencePairs& pairs, const ReferenceModel& live, const ProcessGroups& groups,
                              const ReferenceTableOptions& o);

}  // namespace gputrain
