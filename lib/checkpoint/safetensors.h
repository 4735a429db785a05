// The safetensors format (huggingface/safetensors): an 8-byte little-endian
// header length, a JSON header mapping each tensor name to its dtype, shape
// and [begin, end) byte range in the data that follows, an optional
// "__metadata__" object of string pairs, then the raw little-endian bytes.
// Checkpoint weights and Hugging Face interop use it.
#pragma once
#include <torch/types.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "util/named_tensor.h"

namespace gputrain {

// Writes `tensors` (any device, any layout; copied to contiguous CPU bytes)
// to `path` atomically: a temporary file in the same directory, flushed and
// fsynced, then renamed over `path`, and the directory fsynced; a crash at
// any moment leaves either the old file or the complete new one. Names must
// be unique and not "__metadata__". Throws a runtime Error naming the file.
// Returns the file's size and CRC-32C, taken as it was written.
struct WrittenFile {
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
};
WrittenFile write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

struct SafetensorsFile {
  std::vector<NamedTensor> tensors;  // in file order (by offset), CPU, owning their memory
  std::map<std::string, std::string> metadata;
  const torch::Tensor* find(const std::string& name) const;
};

// A tensor's place in a safetensors file, as its header says.
struct SafetensorsEntry {
  std::string name;
  torch::ScalarType dtype = torch::kFloat;
  std::vector<int64_t> shape;
  uint64_t offset = 0, bytes = 0;  // its data's first byte, from the start of the file, and length
};
struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // in file order (by offset)
  std::map<std::string, std::string> metadata;
  const SafetensorsEntry* find(const std::string& name) const;
};

// The header alone (its 8 + length bytes are all that is read), validated as read_safetensors does:
// readers of parts of tensors (checkpoint/stored_weights.h) read their byte ranges themselves.
SafetensorsHeader read_safetensors_header(const std::string& path);

// Reads and validates a whole file: header size within the file, valid JSON,
// known dtypes, each byte range matching its shape, ranges covering the data
// exactly once (no holes, no overlaps, nothing after). Any violation is a
// DataError naming the file and what is wrong.
SafetensorsFile read_safetensors(const std::string& path);

// The safetensors dtype name of a tensor type ("F32", "BF16", ...); throws for unsupported types.
std::string safetensors_dtype(torch::ScalarType t);

}  // namespace gputrain
