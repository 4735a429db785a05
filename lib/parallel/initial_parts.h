// A model built on the meta device (model/meta_build.h) gets storage only for what this rank keeps,
// filled with exactly those elements of the whole parameters: their initial values
// (model/initial_values.h), or what files hold of them (model/part_reader.h: model.init_from, a
// resumed checkpoint), read piece by piece. What a rank keeps: its tensor-parallel slices, its
// stage's and experts' parameters, under ZeRO-3 its rows of them. No rank computes, reads or holds
// any other part.
#pragma once
#include <torch/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "model/gpt.h"
#include "model/initial_values.h"
#include "model/part_reader.h"
#include "parallel/tensor_shard.h"
#include "util/named_tensor.h"

namespace gputrain {

class InitialParts {
 public:
  // Of `model` as built, before any rank keeps its part: each parameter's distribution and whole
  // index. `files` (outliving this), when given, has the values of the parameters it covers.
  explicit InitialParts(const Gpt& model, const PartReader* files = nullptr);

  // After tensor parallelism kept this rank's slices (rank `rank` of `size`; `split` empty for tp 1).
  void set_tensor_split(const std::vector<TensorShard>& split, int rank, int size);

  // Fills `out` with rows [first, first + count) of this rank's (tensor-parallel) parameter `name`,
  // its further rows (ZeRO-3's padding) with zeros.
  void fill_rows(const std::string& name, torch::Tensor& out, int64_t first, int64_t count) const;
  // Rows [first, first + count) of parameter `name` as the files keep them in 4 bits (PartReader::
  // stored_4bit), where this rank keeps that parameter whole (a tensor-parallel slice is not a band).
  std::optional<Quantized4bit> stored_4bit(const std::string& name, int64_t first, int64_t count) const;
  // The same of the whole parameter's rows, whatever this rank keeps of it (a tensor-parallel slice
  // cuts its blocks from them).
  std::optional<Quantized4bit> whole_stored_4bit(const std::string& name, int64_t first, int64_t count) const;

  // Each of `held` still on the meta device gets storage on `device`, filled; every other parameter of
  // the model left on the meta device (one a stage or another rank holds) becomes empty on `device`.
  // Returns the bytes given.
  int64_t materialize(Gpt& model, const std::vector<NamedTensor>& held, torch::Device device) const;

  // The same parts, their values read from `files` (outliving the copy; null: from the seed alone).
  InitialParts with_files(const PartReader* files) const;
  // Each of `held` (with storage) filled again, in place, with its part.
  void refill(const std::vector<NamedTensor>& held) const;

 private:
  struct Parameter {
    InitialDistribution distribution;
    WholeIndex index;     // this rank's slice of the whole
    bool sliced = false;  // by tensor parallelism
  };
  const Parameter& parameter(const std::string& name) const;
  void fill(torch::Tensor& out, const std::string& name, const WholeIndex& at) const;

  uint64_t seed_;
  const PartReader* files_;
  std::map<std::string, Parameter> params_;
};

}  // namespace gputrain
