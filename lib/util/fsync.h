// Durability for atomic writes: a directory's entries (a rename) reach the
// disk only when the directory is fsynced.
#pragma once
#include <filesystem>

namespace gputrain {

// Best effort: some filesystems refuse directory handles, and a failure here
// cannot be repaired by the caller.
void fsync_directory(const std::filesystem::path& dir);

}  // namespace gputrain
