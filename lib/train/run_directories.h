// The folders a run writes: locked by rank 0 before anything in them is read or removed
// (one run per folder), an earlier run's files refused or, with --overwrite, replaced.
#pragma once
#include <filesystem>
#include <vector>

#include "config/settings.h"
#include "util/dir_lock.h"

namespace gputrain {

// Locks the output directory and the checkpoint directory (when it is another one: it may be a
// second run's output), creating them, and clears saves a dead writer abandoned in the latter.
// Held, the lock proves every earlier save's writer gone.
std::vector<DirectoryLock> lock_run_directories(const Settings& s);

// The output directory, checked: a directory holding an earlier run's metrics is refused unless
// `overwrite`, or the run is `continuing` (a resumed run writing where its checkpoint's run did).
std::filesystem::path prepare_output_dir(const Settings& s, bool overwrite, bool continuing);

// --overwrite starts afresh: the earlier run's checkpoints would otherwise be taken for this
// run's by a later resume: auto.
void remove_old_checkpoints(const Settings& s);

// Whether two paths name the same directory (false when either cannot be resolved).
bool same_directory(const std::filesystem::path& a, const std::filesystem::path& b);

}  // namespace gputrain
