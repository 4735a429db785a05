// Where a model built on the meta device takes the values of its parameters' parts from, when not
// from the seed (model/initial_values.h): files read piece by piece (checkpoint/stored_weights.h),
// so that each rank reads only the elements it keeps.
#pragma once
#include <torch/types.h>

#include <optional>
#include <string>

#include "model/initial_values.h"
#include "precision/quantize_4bit.h"

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
  // Rows [first, first + count) of the whole parameter `name` as the files keep them in 4 bits (a
  // bitsandbytes tensor of a Hugging Face folder that is exactly that band), or nullopt: QLoRA takes
  // such a band as stored rather than quantizing its values again.
  virtual std::optional<Quantized4bit> stored_4bit(const std::string& name, int64_t first, int64_t count) const {
    (void)name, (void)first, (void)count;
    return std::nullopt;
  }
};

}  // namespace gputrain
