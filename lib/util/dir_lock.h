// One writer per directory. A run, an export or a data preparation holds an
// exclusive advisory lock (flock) on <dir>/.gputrain.lock for as long as it
// writes there; a second writer is refused at once, with the holder named.
// The kernel releases the lock when its process dies, SIGKILL included, so
// no stale lock is ever left to remove by hand: a leftover file is only text.
// On NFS the server arbitrates the lock across hosts; on a filesystem that
// refuses locks (Lustre mounted without -o flock) the writer is warned and
// goes on unprotected (docs/run-folders.md).
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace gputrain {

// The lock file's name inside a locked directory.
inline constexpr const char* kLockFileName = ".gputrain.lock";

// Who holds a lock, as its lock file says (written just after locking).
struct LockHolder {
  pid_t pid = 0;
  std::string host;
  int64_t since = 0;  // Unix time the lock was taken
  std::string command;
  // "gputrain pid 1234 on host h since 10:42:07 (gputrain run r.yaml)"
  std::string describe() const;
};

// The holder recorded in `lock_file`, or nullopt when it is missing or not
// (yet) a complete record.
std::optional<LockHolder> read_lock_holder(const std::filesystem::path& lock_file);

class DirectoryLock {
 public:
  // Creates `dir` if missing and locks it. When another process holds it,
  // throws a usage error: "<dir> is in use by <holder>" and `fix` (e.g. "use
  // another --output-dir"), which follows "wait for it, stop it, or ".
  static DirectoryLock acquire(const std::filesystem::path& dir, const std::string& fix);

  DirectoryLock() = default;
  DirectoryLock(DirectoryLock&& other) noexcept;
  DirectoryLock& operator=(DirectoryLock&& other) noexcept;
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;
  ~DirectoryLock();  // releases: removes the lock file, then closes it

  // False when the filesystem refused the lock (the directory is unprotected).
  bool held() const { return held_; }
  const std::filesystem::path& dir() const { return dir_; }

 private:
  void release() noexcept;
  int fd_ = -1;
  bool held_ = false;
  std::filesystem::path dir_;
};

}  // namespace gputrain
