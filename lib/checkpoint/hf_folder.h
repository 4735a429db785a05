// A Hugging Face model folder's files: config.json, and the weights as model.safetensors or as
// shards named by model.safetensors.index.json. Listed with their headers (checkpoint/stored_weights.h
// reads the byte ranges it needs), and written sharded at a size limit with the index beside.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"

namespace gputrain {

// config.json of `dir` (DataError naming the file when it is missing or not JSON).
nlohmann::json read_hf_config(const std::filesystem::path& dir);

// The folder's weight files (model.safetensors, or the shards its index names, in the index's order),
// each with its header; no tensor data is read. The index is checked: a shard it names that is
// missing, or that lacks a tensor the index puts in it, is a DataError naming both files.
struct HfWeightFile {
  std::string path;
  SafetensorsHeader header;
};
std::vector<HfWeightFile> hf_weight_files(const std::filesystem::path& dir);

// Writes `tensors` to `dir` as model.safetensors, or, past `max_shard_bytes`, as
// model-0000K-of-0000N.safetensors with model.safetensors.index.json (save_pretrained's layout).
// Removes weight files an earlier export left there. Returns the files written.
std::vector<std::string> write_hf_weights(const std::filesystem::path& dir, const std::vector<NamedTensor>& tensors,
                                          uint64_t max_shard_bytes);

// "5GB", "500MB", "2GiB", "1000000" -> bytes (save_pretrained's max_shard_size spelling); UsageError otherwise.
uint64_t parse_shard_size(const std::string& text);

}  // namespace gputrain
