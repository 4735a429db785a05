#include "checkpoint/hf_folder.h"

#include <fmt/format.h>

#include <cctype>
#include <map>

#include "util/atomic_file.h"
#include "util/error.h"
#include "util/text_file.h"

namespace gputrain {
namespace {

namespace fs = std::filesystem;

constexpr const char* kIndexName = "model.safetensors.index.json";

}  // namespace

nlohmann::json read_hf_config(const fs::path& dir) {
  const fs::path file = dir / "config.json";
  if (!fs::exists(file))
    throw data_error("'" + dir.string() + "' has no config.json" +
                     "\n    fix: name a folder written by save_pretrained (config.json and its safetensors)");
  return parse_json_file(file, "model config", "use the config.json save_pretrained wrote");
}

std::vector<HfWeightFile> hf_weight_files(const fs::path& dir) {
  if (fs::exists(dir / "model.safetensors")) {
    const std::string file = (dir / "model.safetensors").string();
    return {{file, read_safetensors_header(file)}};
  }
  const fs::path index = dir / kIndexName;
  if (!fs::exists(index))
    throw data_error("'" + dir.string() + "' has neither model.safetensors nor " + kIndexName +
                     "\n    fix: save the model with save_pretrained(dir) (safetensors is its default), or name the "
                     ".safetensors file");
  // Shard -> the tensors the index puts there, shards in the order the index first names them.
  std::vector<std::string> order;
  std::map<std::string, std::vector<std::string>> by_shard;
  try {
    const nlohmann::json map = nlohmann::json::parse(read_text_file(index)).at("weight_map");
    if (!map.is_object() || map.empty()) throw data_error("its weight_map is empty");
    for (const auto& [name, file] : map.items()) {
      const std::string shard = file.get<std::string>();
      if (shard.find('/') != std::string::npos || shard.find("..") != std::string::npos)
        throw data_error("it names shard '" + shard + "', which is not a file in the folder");
      if (!by_shard.count(shard)) order.push_back(shard);
      by_shard[shard].push_back(name);
    }
  } catch (const nlohmann::json::exception& e) {
    throw data_error("'" + index.string() + "' has no valid weight_map: " + e.what() +
                     "\n    fix: use the index save_pretrained wrote");
  } catch (const Error& e) {
    throw data_error("'" + index.string() + "': " + e.what() + "\n    fix: use the index save_pretrained wrote");
  }
  for (const std::string& shard : order)  // every shard first: no half-loaded model for a missing last one
    if (!fs::exists(dir / shard))
      throw data_error("'" + index.string() + "' puts " + std::to_string(by_shard[shard].size()) +
                       " tensors (the first: " + by_shard[shard].front() + ") in '" + shard +
                       "', which is not in the folder\n    fix: download every shard the index names");
  std::vector<HfWeightFile> files;
  for (const std::string& shard : order) {
    const std::string file = (dir / shard).string();
    SafetensorsHeader header = read_safetensors_header(file);
    for (const std::string& name : by_shard[shard])
      if (!header.find(name))
        throw data_error("'" + index.string() + "' puts " + name + " in '" + shard + "', which does not hold it" +
                         "\n    fix: use the index that came with these shards, or download them again");
    files.push_back({file, std::move(header)});
  }
  return files;
}

std::vector<std::string> write_hf_weights(const fs::path& dir, const std::vector<NamedTensor>& tensors,
                                          uint64_t max_shard_bytes) {
  // Greedy in order, as save_pretrained: a tensor larger than the limit gets a shard of its own.
  std::vector<std::vector<NamedTensor>> shards(1);
  uint64_t size = 0, total = 0;
  for (const NamedTensor& t : tensors) {
    const uint64_t n = t.tensor.nbytes();
    if (size > 0 && size + n > max_shard_bytes) {
      shards.emplace_back();
      size = 0;
    }
    shards.back().push_back(t);
    size += n;
    total += n;
  }
  // Weight files of an earlier export would mix with these.
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name == kIndexName || (name.starts_with("model") && name.ends_with(".safetensors"))) fs::remove(entry.path());
  }
  std::vector<std::string> files;
  if (shards.size() == 1) {
    write_safetensors((dir / "model.safetensors").string(), shards.front(), {{"format", "pt"}});
    files.push_back("model.safetensors");
    return files;
  }
  nlohmann::ordered_json index;
  index["metadata"] = {{"total_size", total}};
  index["weight_map"] = nlohmann::ordered_json::object();
  for (size_t k = 0; k < shards.size(); ++k) {
    const std::string name = fmt::format("model-{:05d}-of-{:05d}.safetensors", k + 1, shards.size());
    write_safetensors((dir / name).string(), shards[k], {{"format", "pt"}});
    for (const NamedTensor& t : shards[k]) index["weight_map"][t.name] = name;
    files.push_back(name);
  }
  write_file_atomic((dir / kIndexName).string(), index.dump(2) + "\n");
  files.push_back(kIndexName);
  return files;
}

uint64_t parse_shard_size(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  std::string unit = text.substr(i);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  static const std::map<std::string, double> units = {
      {"", 1},      {"B", 1},        {"KB", 1e3},        {"MB", 1e6},           {"GB", 1e9},
      {"TB", 1e12}, {"KIB", 1024.0}, {"MIB", 1048576.0}, {"GIB", 1073741824.0}, {"TIB", 1099511627776.0}};
  auto it = units.find(unit);
  double number = 0;
  try {
    number = i > 0 ? std::stod(text.substr(0, i)) : 0;
  } catch (const std::exception&) {
    number = 0;
  }
  if (it == units.end() || number <= 0)
    throw usage_error("--max-shard-size '" + text + "' is not a size" +
                      "\n    fix: write a number with a unit, e.g. 5GB, 500MB or 2GiB");
  return static_cast<uint64_t>(number * it->second);
}

}  // namespace gputrain
