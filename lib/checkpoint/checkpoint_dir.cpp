#include "checkpoint/checkpoint_dir.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "metrics/metrics_writer.h"
#include "util/error.h"
#include "util/fsync.h"

namespace gputrain {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

constexpr const char* kManifest = "manifest.json";
constexpr const char* kFormat = "gputrain-checkpoint";

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

// The step of a "step_<N>" directory name, or -1.
int64_t step_of(const std::string& name) {
  if (name.rfind("step_", 0) != 0 || name.size() == 5) return -1;
  int64_t v = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || v > (INT64_MAX - 9) / 10) return -1;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

const std::array<uint32_t, 256>& crc_table() {
  static const std::array<uint32_t, 256> t = [] {
    std::array<uint32_t, 256> table{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;  // Castagnoli, reflected
      table[i] = c;
    }
    return table;
  }();
  return t;
}

}  // namespace

uint32_t file_crc32c(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw data_error("cannot read '" + file.string() + "'");
  const auto& table = crc_table();
  uint32_t crc = 0xffffffffu;
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto n = static_cast<size_t>(in.gcount());
    for (size_t i = 0; i < n; ++i) crc = table[(crc ^ static_cast<uint8_t>(buf[i])) & 0xff] ^ (crc >> 8);
  }
  return crc ^ 0xffffffffu;
}

CheckpointWriter::CheckpointWriter(const fs::path& root, int64_t step)
    : root_(root), final_(root / step_name(step)), step_(step) {
  std::error_code ec;
  fs::create_directories(root_, ec);
  if (ec) throw runtime_error("cannot create checkpoint directory '" + root_.string() + "': " + ec.message());
  // Leftovers of writers that were killed: never complete, safe to remove.
  for (const auto& e : fs::directory_iterator(root_, ec))
    if (e.path().filename().string().rfind(".tmp-step_", 0) == 0) fs::remove_all(e.path(), ec);
  tmp_ = root_ / (".tmp-" + step_name(step) + "-" + std::to_string(::getpid()));
  fs::remove_all(tmp_, ec);
  fs::create_directory(tmp_, ec);
  if (ec) throw runtime_error("cannot create '" + tmp_.string() + "': " + ec.message());
}

CheckpointWriter::~CheckpointWriter() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(tmp_, ec);
}

void CheckpointWriter::add_safetensors(const std::string& file, const std::vector<NamedTensor>& tensors,
                                       const std::map<std::string, std::string>& metadata) {
  write_safetensors((tmp_ / file).string(), tensors, metadata);
}

void CheckpointWriter::add_json(const std::string& file, const json& content) {
  write_file_atomic((tmp_ / file).string(), content.dump(2) + "\n");
}

fs::path CheckpointWriter::commit() {
  json files = json::object();
  std::vector<fs::path> entries;
  for (const auto& e : fs::directory_iterator(tmp_)) entries.push_back(e.path());
  std::sort(entries.begin(), entries.end());
  for (const auto& p : entries) {
    fsync_file(p);
    files[p.filename().string()] = {{"bytes", fs::file_size(p)}, {"crc32c", file_crc32c(p)}};
  }
  json manifest = {{"format", kFormat}, {"version", 1}, {"step", step_}, {"files", files}};
  write_file_atomic((tmp_ / kManifest).string(), manifest.dump(2) + "\n");
  fsync_directory(tmp_);
  std::error_code ec;
  // Replacing the same step: move the old one aside first (rename cannot replace a non-empty directory).
  const fs::path old = root_ / (".tmp-" + step_name(step_) + "-replaced");
  if (fs::exists(final_)) fs::rename(final_, old, ec);
  fs::rename(tmp_, final_, ec);
  if (ec) throw runtime_error("cannot move checkpoint into '" + final_.string() + "': " + ec.message());
  fsync_directory(root_);
  fs::remove_all(old, ec);
  committed_ = true;
  return final_;
}

std::optional<std::string> checkpoint_problem(const fs::path& dir) {
  const fs::path mpath = dir / kManifest;
  std::ifstream in(mpath);
  if (!in) return "no " + std::string(kManifest) + " (the save did not finish)";
  json m;
  try {
    m = json::parse(in);
    if (m.at("format") != kFormat) return std::string(kManifest) + " is not a gputrain checkpoint manifest";
    for (const auto& [name, f] : m.at("files").items()) {
      const fs::path p = dir / name;
      std::error_code ec;
      const auto size = fs::file_size(p, ec);
      if (ec) return name + " is missing";
      if (size != f.at("bytes").get<uint64_t>())
        return name + " has " + std::to_string(size) + " bytes, the manifest says " + std::to_string(f.at("bytes").get<uint64_t>());
      if (file_crc32c(p) != f.at("crc32c").get<uint32_t>()) return name + " fails its checksum (corrupt)";
    }
  } catch (const json::exception& e) {
    return std::string(kManifest) + " is malformed (" + e.what() + ")";
  }
  return std::nullopt;
}

CheckpointListing list_checkpoints(const fs::path& root) {
  std::vector<std::pair<int64_t, fs::path>> dirs;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const int64_t step = step_of(e.path().filename().string());
    if (step >= 0 && e.is_directory()) dirs.emplace_back(step, e.path());
  }
  std::sort(dirs.begin(), dirs.end());
  CheckpointListing out;
  for (const auto& [step, p] : dirs) {
    if (auto problem = checkpoint_problem(p))
      out.broken.emplace_back(p, *problem);
    else
      out.complete.push_back(p);
  }
  return out;
}

void prune_checkpoints(const fs::path& root, int64_t keep_last) {
  if (keep_last <= 0) return;
  const CheckpointListing l = list_checkpoints(root);
  for (size_t i = 0; i + static_cast<size_t>(keep_last) < l.complete.size(); ++i) {
    std::error_code ec;
    fs::remove_all(l.complete[i], ec);
    if (ec) throw runtime_error("cannot remove old checkpoint '" + l.complete[i].string() + "': " + ec.message());
  }
}

}  // namespace gputrain
