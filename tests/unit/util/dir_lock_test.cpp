// One writer per directory (util/dir_lock.h): a second lock on a held
// directory is refused naming the holder; a holder killed with SIGKILL leaves
// the directory free at once; a released lock leaves no file behind.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <optional>

#include <fmt/format.h>

#include "test_util.h"
#include "util/dir_lock.h"
#include "util/error.h"
#include "util/failpoint.h"
#include "util/process_info.h"

using namespace gputrain;
using namespace gputrain::test;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

// The message of the error that locking `dir` throws, or "" when it locks (and is released again).
std::string lock_error(const fs::path& dir) {
  try {
    DirectoryLock::acquire(dir, "use another --output-dir");
    return "";
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kUsage);  // exit 2
    return e.what();
  }
}

// A child process that locks `dir`, says so through a pipe, and waits to be killed.
pid_t spawn_holder(const fs::path& dir) {
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(ready[0]);
    try {
      DirectoryLock lock = DirectoryLock::acquire(dir, "x");
      (void)!::write(ready[1], "1", 1);
      for (;;) ::pause();
    } catch (...) {
      ::_exit(3);
    }
  }
  ::close(ready[1]);
  char c = 0;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  ::close(ready[0]);
  return pid;
}

}  // namespace

TEST_CASE("dir lock: a held directory is refused with its holder named, and free again once released", "[util]") {
  TempDir tmp;
  const fs::path dir = tmp.path() / "runs" / "x";
  {
    DirectoryLock held = DirectoryLock::acquire(dir, "use another --output-dir");  // creates the directory
    CHECK(held.held());
    REQUIRE(fs::exists(dir / kLockFileName));
    const auto holder = read_lock_holder(dir / kLockFileName);
    REQUIRE(holder);
    CHECK(holder->pid == ::getpid());
    CHECK(holder->host == host_name());
    CHECK(holder->command.find("gputrain_tests") == 0);
    // flock locks belong to an open file: a second acquire, even in this process, is a second writer.
    const std::string message = lock_error(dir), pid = std::to_string(::getpid());
    CHECK_THAT(message, Contains(fmt::format("'{}' is in use by gputrain pid {} on host {} since ", dir.string(), pid,
                                             host_name())));
    CHECK_THAT(message, Contains(fmt::format("fix: wait for it, stop it (kill {}), or use another --output-dir", pid)));
    // Moving the lock keeps it held.
    DirectoryLock moved = std::move(held);
    CHECK(moved.held());
    CHECK_FALSE(lock_error(dir).empty());
  }
  CHECK_FALSE(fs::exists(dir / kLockFileName));  // released: the file goes with the lock
  CHECK(lock_error(dir).empty());
}

TEST_CASE("dir lock: a holder killed with SIGKILL leaves the directory free at once, its file only text", "[util]") {
  TempDir tmp;
  const fs::path dir = tmp.path() / "out";
  const pid_t holder = spawn_holder(dir);
  const std::string refused = lock_error(dir);
  CHECK_THAT(refused, Contains("is in use by gputrain pid " + std::to_string(holder)));
  ::kill(holder, SIGKILL);
  int status = 0;
  REQUIRE(::waitpid(holder, &status, 0) == holder);
  // The killed holder's record is still there, but the kernel released its lock.
  const auto stale = read_lock_holder(dir / kLockFileName);
  REQUIRE(stale);
  CHECK(stale->pid == holder);
  DirectoryLock next = DirectoryLock::acquire(dir, "x");
  CHECK(next.held());
  CHECK(read_lock_holder(dir / kLockFileName)->pid == ::getpid());  // the record is the new holder's
}

TEST_CASE("dir lock: a lock file that is not a complete record names no holder", "[util]") {
  TempDir tmp;
  write_file(tmp.file("empty"), "");
  write_file(tmp.file("partial"), "pid: 12");  // cut off while being written
  write_file(tmp.file("no-host"), "pid: 12\nsince: 1764067327\n");
  write_file(tmp.file("bad-pid"), "pid: x\nhost: h\nsince: 1764067327\n");
  for (const char* f : {"empty", "partial", "no-host", "bad-pid", "missing"}) {
    INFO(f);
    CHECK_FALSE(read_lock_holder(tmp.file(f)));
  }
  write_file(
      tmp.file("good"),
      "# comment\npid: 12\nhost: node-7\nsince: 1764072000 (2025-11-25 12:00 UTC)\ncommand: gputrain run r.yaml\n");
  const auto h = read_lock_holder(tmp.file("good"));
  REQUIRE(h);
  CHECK(h->pid == 12);
  CHECK(h->host == "node-7");
  CHECK(h->since == 1764072000);  // noon UTC: the same date in every time zone from -11 to +11
  CHECK_THAT(h->describe(),
             Contains("gputrain pid 12 on host node-7 since 2025-11-25 ") && Contains("(gputrain run r.yaml)"));
}

TEST_CASE("dir lock: a directory that cannot be made is a clear error", "[util]") {
  TempDir tmp;
  write_file(tmp.file("file"), "not a directory");
  try {
    DirectoryLock::acquire(tmp.path() / "file" / "out", "x");
    FAIL("locked a directory under a regular file");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kRuntime);
    CHECK_THAT(std::string(e.what()),
               Contains("cannot create directory '" + (tmp.path() / "file" / "out").string() + "'"));
  }
}

TEST_CASE("dir lock: a lock taken on a file its holder removed while releasing is retaken on a fresh file", "[util]") {
  TempDir dir;
  std::optional<DirectoryLock> first = DirectoryLock::acquire(dir.path(), "x");
  // The failpoint between open() and flock(): the holder releases there, unlinking the file the second
  // acquire has just opened, so its flock succeeds on a file no longer in the directory.
  int opened = 0;
  set_failpoint_hook("dir_lock.opened", [&] {
    if (++opened == 1) first.reset();
  });
  DirectoryLock second = DirectoryLock::acquire(dir.path(), "x");
  set_failpoint_hook("dir_lock.opened", nullptr);
  CHECK(opened == 2);  // it noticed, and opened the file anew
  // The lock guards the directory: its file is there, and a third writer is refused.
  CHECK(fs::exists(dir.path() / kLockFileName));
  CHECK_THAT(lock_error(dir.path()), Contains("is in use by gputrain pid " + std::to_string(::getpid())));
}
