// Durability for atomic writes: a file's bytes and a directory's entries
// (a rename) reach the disk only when fsynced.
#pragma once
#include <filesystem>

namespace gputrain {

// Throws a runtime Error naming the file when it cannot be synced.
void fsync_file(const std::filesystem::path& file);
// Best effort: some filesystems refuse directory handles, and a failure here
// cannot be repaired by the caller.
void fsync_directory(const std::filesystem::path& dir);

}  // namespace gputrain
