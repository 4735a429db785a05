// Where a model built on the meta device takes the values of its parameters' parts from, when not
// from the seed (model/initial_values.h): files read piece by piece (checkpoint/stored_weights.h),
// so that each rank reads only the elements it keeps.
#pragma once
#include <torch/types.h>

#include <string>

#include "model/initial_values.h"

namespace gputrain {

class PartReader {
 public:
  enum class Coverage { kNone, kPart, kAll };
  virtual ~PartReader() = default;
  // Which of the whole parameter `name`'s elements this reader gives (kPart: the others keep their
  // initial values, as the padding rows of a vocabulary matrix loaded from Hugging Face do).
  virtual Coverage covers(const std::string& name) const = 0;
  // Writes into `out` (shaped [at.rows, at.cols] or as the part) the elements `at` names that it
  // gives; rows marked as padding (at.rows < 0) become zeros.
  virtual void read(torch::Tensor& out, const std::string& name, const WholeIndex& at) const = 0;
};

}  // namespace gputrain
