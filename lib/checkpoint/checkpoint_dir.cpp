#include "checkpoint/checkpoint_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>

#include "util/atomic_file.h"
#include "util/crc32c.h"
#include "util/error.h"
#include "util/fsync.h"
#include "util/process_info.h"

namespace gputrain {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

constexpr const char* kManifest = "manifest.json";
constexpr const char* kFormat = "gputrain-checkpoint";

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

// Temporary names say whose they are: ".tmp-step_<N>-<host>-<pid>" while a
// save is written, "-replaced" appended for the old copy of a step being
// replaced, "-pruned" for an old checkpoint being removed.
std::string temporary_name(const std::string& step_dir, const std::string& suffix = "",
                           const std::string& writer = this_writer_id()) {
  return ".tmp-" + step_dir + "-" + writer + suffix;
}

// A rank's record of the files it wrote into a shared save (removed before the manifest is written).
std::string part_record(int rank) { return ".part-" + std::to_string(rank) + ".json"; }

// The writer of a temporary entry: host "" for names of earlier versions
// (".tmp-step_<N>-<pid>", this host's), pid 0 where the name has none.
struct TemporaryOwner {
  std::string host;
  pid_t pid = 0;
};

std::optional<TemporaryOwner> temporary_owner(std::string name) {
  if (name.rfind(".tmp-step_", 0) != 0) return std::nullopt;
  for (const std::string suffix : {"-replaced", "-pruned"})
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      name.resize(name.size() - suffix.size());
  const size_t after_step = name.find('-', 5);
  if (after_step == std::string::npos) return TemporaryOwner{};
  const std::string tail = name.substr(after_step + 1);  // "<host>-<pid>" (hosts may hold '-'), or "<pid>"
  const size_t dash = tail.rfind('-');
  const std::string pid = dash == std::string::npos ? tail : tail.substr(dash + 1);
  TemporaryOwner owner;
  if (dash != std::string::npos) owner.host = tail.substr(0, dash);
  if (!pid.empty() && pid.size() < 10 && pid.find_first_not_of("0123456789") == std::string::npos)
    owner.pid = static_cast<pid_t>(std::stol(pid));
  return owner;
}

}  // namespace

std::string this_writer_id() { return host_name() + "-" + std::to_string(::getpid()); }

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

void clear_abandoned_saves(const fs::path& root, bool other_hosts, const fs::path& keep) {
  const std::string here = host_name();
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    if (!keep.empty() && e.path() == keep) continue;
    const auto owner = temporary_owner(e.path().filename().string());
    if (!owner) continue;
    // This host's is gone when its pid is (this process saves one checkpoint at a time: its own are leftovers).
    bool gone = other_hosts;
    if (owner->pid == 0) gone = true;
    else if (owner->host.empty() || owner->host == here)
      gone = owner->pid == ::getpid() || !process_running(owner->pid);
    std::error_code rm;
    if (gone) fs::remove_all(e.path(), rm);
  }
}

uint32_t file_crc32c(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw data_error("cannot read '" + file.string() + "'");
  Crc32c crc;
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    crc.update(buf.data(), static_cast<size_t>(in.gcount()));
  }
  return crc.value();
}

CheckpointWriter::CheckpointWriter(const fs::path& root, int64_t step, std::optional<CheckpointJoin> join)
    : root_(root), final_(root / step_name(step)), step_(step), join_(std::move(join)) {
  if (join_ && join_->ranks <= 1) join_.reset();
  std::error_code ec;
  fs::create_directories(root_, ec);
  if (ec) throw runtime_error("cannot create checkpoint directory '" + root_.string() + "': " + ec.message());
  tmp_ = root_ / (join_ ? temporary_name(step_name(step), "", join_->lead) : temporary_name(step_name(step)));
  // The other ranks may be writing into a shared save's directory already: only the lead clears
  // leftovers, never that directory, and nobody empties it.
  if (!part()) clear_abandoned_saves(root_, /*other_hosts=*/false, join_ ? tmp_ : fs::path());
  if (!join_) fs::remove_all(tmp_, ec);
  fs::create_directories(tmp_, ec);
  if (ec) throw runtime_error("cannot create '" + tmp_.string() + "': " + ec.message());
}

CheckpointWriter::~CheckpointWriter() {
  if (committed_) return;
  std::error_code ec;
  if (!part()) {
    fs::remove_all(tmp_, ec);
    return;
  }
  for (const auto& [name, f] : files_.items()) fs::remove(tmp_ / name, ec);
}

void CheckpointWriter::await_parts() {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration<double>(join_->timeout_s);
  for (int r = 1; r < join_->ranks; ++r) {
    const fs::path record = tmp_ / part_record(r);
    while (!fs::exists(record)) {
      if (join_->cancelled && join_->cancelled->load())
        throw runtime_error("checkpoint of step " + std::to_string(step_) + " abandoned: the run is ending");
      if (Clock::now() > deadline)
        throw runtime_error(
            "checkpoint of step " + std::to_string(step_) + ": rank " + std::to_string(r) +
            "'s files did not appear in '" + tmp_.string() + "' within " +
            std::to_string(static_cast<int64_t>(join_->timeout_s)) +
            " s\n    fix: put checkpoint.dir on a filesystem every rank sees (each rank writes its own shards), "
            "or raise parallel.timeout_s");
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    json part;
    try {
      std::ifstream in(record);
      part = json::parse(in);
      for (const auto& [name, f] : part.at("files").items()) {
        if (files_.contains(name))
          throw runtime_error("checkpoint of step " + std::to_string(step_) + ": ranks 0 and " + std::to_string(r) +
                              " both wrote '" + name + "'");
        files_[name] = f;
      }
    } catch (const json::exception& e) {
      throw runtime_error("'" + record.string() + "' is malformed: " + e.what());
    }
    std::error_code ec;
    fs::remove(record, ec);
  }
}

void CheckpointWriter::add_safetensors(const std::string& file, const std::vector<NamedTensor>& tensors,
                                       const std::map<std::string, std::string>& metadata) {
  const WrittenFile w = write_safetensors((tmp_ / file).string(), tensors, metadata);
  files_[file] = {{"bytes", w.bytes}, {"crc32c", w.crc32c}};
}

void CheckpointWriter::add_json(const std::string& file, const json& content) {
  add_text(file, content.dump(2) + "\n");
}

void CheckpointWriter::add_text(const std::string& file, const std::string& text) {
  write_file_atomic((tmp_ / file).string(), text);
  Crc32c crc;
  crc.update(text.data(), text.size());
  files_[file] = {{"bytes", text.size()}, {"crc32c", crc.value()}};
}

fs::path CheckpointWriter::commit() {
  if (part()) {  // the lead lists these files in its manifest
    write_file_atomic((tmp_ / part_record(join_->rank)).string(),
                      json{{"rank", join_->rank}, {"files", files_}}.dump() + "\n");
    committed_ = true;
    return tmp_;
  }
  if (join_) await_parts();
  // Each file was fsynced and checksummed as it was written: no second pass over the bytes.
  json manifest = {{"format", kFormat}, {"version", 1}, {"step", step_}, {"files", files_}};
  write_file_atomic((tmp_ / kManifest).string(), manifest.dump(2) + "\n");
  fsync_directory(tmp_);
  std::error_code ec;
  if (fs::exists(final_)) {
    // Replacing the same step: swap the two directories in one step, then drop the old one.
    if (::renameat2(AT_FDCWD, tmp_.c_str(), AT_FDCWD, final_.c_str(), RENAME_EXCHANGE) != 0) {
      if (errno != EINVAL && errno != ENOSYS)
        throw runtime_error("cannot move checkpoint into '" + final_.string() + "': " + std::strerror(errno));
      // A filesystem without exchange: move the old one aside (briefly no step_<N>; older ones remain).
      fs::rename(final_, tmp_.string() + "-replaced", ec);
      fs::rename(tmp_, final_, ec);
      if (ec) throw runtime_error("cannot move checkpoint into '" + final_.string() + "': " + ec.message());
      tmp_ += "-replaced";
    }
    fsync_directory(root_);
    fs::remove_all(tmp_, ec);  // now the old checkpoint
  } else {
    fs::rename(tmp_, final_, ec);
    if (ec) throw runtime_error("cannot move checkpoint into '" + final_.string() + "': " + ec.message());
    fsync_directory(root_);
  }
  committed_ = true;
  return final_;
}

std::optional<std::string> checkpoint_problem(const fs::path& dir, CheckpointCheck check) {
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
        return name + " has " + std::to_string(size) + " bytes, the manifest says " +
               std::to_string(f.at("bytes").get<uint64_t>());
      if (check == CheckpointCheck::kChecksums && file_crc32c(p) != f.at("crc32c").get<uint32_t>())
        return name + " fails its checksum (corrupt)";
    }
  } catch (const json::exception& e) {
    return std::string(kManifest) + " is malformed (" + e.what() + ")";
  }
  return std::nullopt;
}

CheckpointListing list_checkpoints(const fs::path& root, CheckpointCheck check) {
  std::vector<std::pair<int64_t, fs::path>> dirs;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const int64_t step = step_of(e.path().filename().string());
    if (step >= 0 && e.is_directory()) dirs.emplace_back(step, e.path());
  }
  std::sort(dirs.begin(), dirs.end());
  CheckpointListing out;
  for (const auto& [step, p] : dirs) {
    if (auto problem = checkpoint_problem(p, check)) out.broken.emplace_back(p, *problem);
    else out.complete.push_back(p);
  }
  return out;
}

void prune_checkpoints(const fs::path& root, int64_t keep_last) {
  if (keep_last <= 0) return;
  const CheckpointListing l = list_checkpoints(root);
  for (size_t i = 0; i + static_cast<size_t>(keep_last) < l.complete.size(); ++i) {
    const fs::path doomed = root / temporary_name(l.complete[i].filename().string(), "-pruned");
    std::error_code ec;
    fs::rename(l.complete[i], doomed, ec);
    if (!ec) fs::remove_all(doomed, ec);
    if (ec) throw runtime_error("cannot remove old checkpoint '" + l.complete[i].string() + "': " + ec.message());
  }
}

}  // namespace gputrain
