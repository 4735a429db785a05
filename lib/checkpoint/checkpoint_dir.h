// Checkpoint directories that a crash cannot corrupt. A checkpoint is a
// directory <root>/step_<N> of files plus manifest.json listing each file's
// size and CRC-32C. It is assembled under a hidden temporary name, every file
// and the manifest fsynced, then renamed into place in one step, so a
// process killed at any moment (SIGKILL included) leaves the previous
// checkpoints untouched and at worst a temporary directory that readers
// ignore and a later writer removes once its writer is gone.
//
// The ranks of a parallel run write one checkpoint together (CheckpointJoin): each writes its own
// files into the lead's temporary directory and a record of them; the lead waits for every record,
// lists all files in the one manifest and moves the directory into place.
#pragma once
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"

namespace gputrain {

// Whose temporary directory a save writes into: "<host>-<pid>" of this process.
std::string this_writer_id();

// A save shared by `ranks` processes: rank 0 (the lead, writer id `lead`) commits it once every
// other rank has recorded its files, waiting at most `timeout_s` (and no longer once `*cancelled`).
struct CheckpointJoin {
  std::string lead;
  int rank = 0, ranks = 1;
  double timeout_s = 600;
  const std::atomic<bool>* cancelled = nullptr;
};

class CheckpointWriter {
 public:
  // Starts step `step` under `root` (created if missing); `join` when it is one rank's part.
  CheckpointWriter(const std::filesystem::path& root, int64_t step, std::optional<CheckpointJoin> join = {});
  // An uncommitted checkpoint's temporary directory is removed (a rank's part: its own files).
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  void add_safetensors(const std::string& file, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});
  void add_json(const std::string& file, const nlohmann::ordered_json& content);
  void add_text(const std::string& file, const std::string& text);
  // Writes the manifest and moves the checkpoint into place; returns its path.
  // An existing checkpoint of the same step is replaced by an atomic exchange,
  // so the step is complete on disk at every moment. A part (rank > 0) records
  // its files for the lead instead and returns the temporary directory.
  std::filesystem::path commit();

 private:
  bool part() const { return join_ && join_->rank > 0; }
  void await_parts();  // the lead: every other rank's files into files_

  std::filesystem::path root_, tmp_, final_;
  int64_t step_;
  std::optional<CheckpointJoin> join_;
  nlohmann::ordered_json files_ = nlohmann::ordered_json::object();  // name -> size and CRC, taken while writing
  bool committed_ = false;
};

// How closely to look at a checkpoint: kSizes reads only the manifest and the
// files' sizes (what a killed save leaves wrong; instant at any model size),
// kChecksums also reads every byte (what a corrupted disk or copy leaves wrong).
enum class CheckpointCheck { kSizes, kChecksums };

// Why `dir` is not a complete checkpoint (missing or unreadable manifest, a
// listed file missing, of the wrong size or checksum), or nullopt when it is.
std::optional<std::string> checkpoint_problem(const std::filesystem::path& dir,
                                              CheckpointCheck check = CheckpointCheck::kChecksums);

struct CheckpointListing {
  std::vector<std::filesystem::path> complete;                        // oldest first
  std::vector<std::pair<std::filesystem::path, std::string>> broken;  // with the reason
};
// The step_<N> directories under root, checked as `check` says (temporary
// ones are ignored). Loading verifies checksums anyway, so listings default to
// the cheap check rather than reading every checkpoint's bytes.
CheckpointListing list_checkpoints(const std::filesystem::path& root, CheckpointCheck check = CheckpointCheck::kSizes);

// A checkpoint directory's name: step_<N>, N zero-padded to 8 digits.
std::string step_name(int64_t step);

// Removes all but the newest `keep_last` complete checkpoints (0 = keep all).
// Each is first renamed to a temporary name, so a kill part-way through
// leaves a leftover the next writer clears, not a broken step directory.
void prune_checkpoints(const std::filesystem::path& root, int64_t keep_last);

// Removes the temporary entries under root whose writers are gone: this
// host's whose pid no longer runs (or is this process's own), and, when
// `other_hosts` (the caller holds root's directory lock, util/dir_lock.h, so no
// other writer can be live), those of other hosts too. A live writer's never, nor `keep`.
void clear_abandoned_saves(const std::filesystem::path& root, bool other_hosts, const std::filesystem::path& keep = {});

// CRC-32C (Castagnoli) of a file's bytes (util/crc32c.h).
uint32_t file_crc32c(const std::filesystem::path& file);

}  // namespace gputrain
