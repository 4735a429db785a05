// The folders a run writes: locked by rank 0 before anything in them is read or removed
// (one run per folder), an earlier run's files refused or, with --overwrite, replaced.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "config/settings.h"
#include "parallel/world.h"
#include "util/dir_lock.h"

namespace gputrain {

// Locks the output directory and the checkpoint directory (when it is another one: it may be a
// second run's output), creating them, and clears saves a dead writer abandoned in the latter.
// Held, the lock proves every earlier save's writer gone.
std::vector<DirectoryLock> lock_run_directories(const Settings& s);

// The run a resumed checkpoint belongs to, as far as this run's output folder is concerned.
struct SavedRun {
  std::filesystem::path checkpoint;  // the checkpoint directory resumed from
  std::filesystem::path output_dir;  // the output folder of the run that saved it
  bool continued = false;            // this run continues it, appending to its metrics
};

// `continued` when the checkpoint lies inside this run's output folder (its checkpoints/, also after
// the folder was moved or copied with its checkpoints) or when the saving run wrote to this folder.
SavedRun saved_run(const std::filesystem::path& checkpoint, const std::filesystem::path& saved_output_dir,
                   const Settings& s);

// The output directory, checked: a directory holding an earlier run's metrics is refused unless
// `overwrite`, or the run continues the checkpoint's run (`resumed`, null for a fresh start); the
// refusal names the folder a checkpoint of another run belongs to.
std::filesystem::path prepare_output_dir(const Settings& s, bool overwrite, const SavedRun* resumed);

// --overwrite starts afresh: the earlier run's checkpoints would otherwise be taken for this
// run's by a later resume: auto.
void remove_old_checkpoints(const Settings& s);

// torchrun's restarts (parallel/world.h: agent_store, attempt). Each attempt's rank 0 names its
// torchrun agent (host, the agent's pid, TORCHELASTIC_RUN_ID) in the output folder; a later attempt
// of the same agent that resumed nothing (no checkpoint yet) replaces the files the failed attempt
// wrote there, as gputrain's own --max-restarts does. Any other folder's metrics stay refused.
void mark_torchrun_attempt(const std::filesystem::path& out, const World& world);
bool replaces_failed_torchrun_attempt(const std::filesystem::path& out, const World& world);

// Whether two paths name the same directory (false when either cannot be resolved).
bool same_directory(const std::filesystem::path& a, const std::filesystem::path& b);

}  // namespace gputrain
