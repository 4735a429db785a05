#include "util/dir_lock.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

#include "util/error.h"
#include "util/failpoint.h"
#include "util/process_info.h"

namespace gputrain {
namespace {

namespace fs = std::filesystem;

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string format_time(int64_t unix_s, const char* format) {
  const std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[64];
  return std::strftime(buf, sizeof buf, format, &tm) > 0 ? std::string(buf) : std::to_string(unix_s);
}

// The lock file's text: a few "key: value" lines for a person, read back by read_lock_holder.
std::string holder_record() {
  const int64_t now = unix_now();
  std::ostringstream r;
  r << "# gputrain: the process below writes into this directory while it holds an flock on this file\n"
    << "pid: " << ::getpid() << "\n"
    << "host: " << host_name() << "\n"
    << "since: " << now << " (" << format_time(now, "%Y-%m-%d %H:%M:%S %Z") << ")\n"
    << "command: " << process_command_line() << "\n";
  return r.str();
}

// Best effort: the record only informs people; the lock is what protects.
void write_holder_record(int fd) {
  const std::string r = holder_record();
  if (::ftruncate(fd, 0) == 0) (void)!::pwrite(fd, r.data(), r.size(), 0);
}

bool same_file(int fd, const fs::path& path) {
  struct stat open_st {
  }, path_st{};
  return ::fstat(fd, &open_st) == 0 && ::stat(path.c_str(), &path_st) == 0 && open_st.st_dev == path_st.st_dev &&
         open_st.st_ino == path_st.st_ino;
}

// The holder writes its record right after locking: give it a moment before
// saying the record is missing.
std::optional<LockHolder> wait_for_holder(const fs::path& file) {
  for (int i = 0; i < 20; ++i) {
    if (auto h = read_lock_holder(file)) return h;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return std::nullopt;
}

Error in_use_error(const fs::path& dir, const std::string& fix) {
  const std::optional<LockHolder> h = wait_for_holder(dir / kLockFileName);
  std::string who = "another process (its lock file names none)";
  std::string stop = "stop it";
  if (h) {
    who = h->describe();
    if (h->host == host_name()) {
      stop = "stop it (kill " + std::to_string(h->pid) + ")";
      if (!process_running(h->pid))
        who += ", or by a process it started (pid " + std::to_string(h->pid) + " has exited)";
    }
  }
  return usage_error("'" + dir.string() + "' is in use by " + who + "\n    fix: wait for it, " + stop + ", or " + fix);
}

}  // namespace

std::string LockHolder::describe() const {
  const int64_t now = unix_now();
  const bool today = format_time(now, "%F") == format_time(since, "%F");
  std::string d = "gputrain pid " + std::to_string(pid) + " on host " + host + " since " +
                  format_time(since, today ? "%H:%M:%S %Z" : "%F %H:%M %Z");
  if (!command.empty()) d += " (" + command + ")";
  return d;
}

std::optional<LockHolder> read_lock_holder(const fs::path& lock_file) {
  std::ifstream in(lock_file);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  if (s.empty() || s.back() != '\n') return std::nullopt;  // being written
  LockHolder h;
  bool has_pid = false, has_host = false, has_since = false;
  std::istringstream lines(s);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t colon = line.find(": ");
    if (line.empty() || line[0] == '#' || colon == std::string::npos) continue;
    const std::string key = line.substr(0, colon), value = line.substr(colon + 2);
    try {
      if (key == "pid") h.pid = static_cast<pid_t>(std::stol(value)), has_pid = true;
      if (key == "since") h.since = std::stoll(value), has_since = true;
    } catch (const std::exception&) {
      return std::nullopt;
    }
    if (key == "host") h.host = value, has_host = !value.empty();
    if (key == "command") h.command = value;
  }
  if (!has_pid || !has_host || !has_since) return std::nullopt;
  return h;
}

DirectoryLock DirectoryLock::acquire(const fs::path& dir, const std::string& fix) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw runtime_error("cannot create directory '" + dir.string() + "': " + ec.message());
  const fs::path file = dir / kLockFileName;
  for (int attempt = 0;; ++attempt) {
    const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
      throw runtime_error("cannot create the lock file '" + file.string() + "': " + std::strerror(errno) +
                          "\n    fix: choose a directory this user can write to");
    failpoint("dir_lock.opened");  // tests release the holder here: the file this fd opened is then gone
    DirectoryLock lock;
    lock.fd_ = fd;
    lock.dir_ = dir;
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if (err == EWOULDBLOCK || err == EINTR) {
        ::close(std::exchange(lock.fd_, -1));  // not ours: leave the file alone
        if (err == EINTR) continue;
        throw in_use_error(dir, fix);
      }
      // ENOLCK, EOPNOTSUPP, ENOSYS: a filesystem that keeps no locks (e.g. Lustre without -o flock).
      spdlog::warn(
          "'{}' is on a filesystem that refuses file locks ({}): nothing stops a second gputrain from "
          "writing into it while this one does; make sure only one does (on Lustre, mount with -o flock)",
          dir.string(), std::strerror(err));
      write_holder_record(fd);
      return lock;
    }
    // A holder removes the file as it releases: a lock taken on the removed file would guard nothing.
    if (!same_file(fd, file)) {
      if (attempt >= 100) throw runtime_error("cannot lock '" + file.string() + "': it keeps being replaced");
      continue;
    }
    lock.held_ = true;
    write_holder_record(fd);
    return lock;
  }
}

DirectoryLock::DirectoryLock(DirectoryLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), held_(std::exchange(other.held_, false)), dir_(std::move(other.dir_)) {}

DirectoryLock& DirectoryLock::operator=(DirectoryLock&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = std::exchange(other.fd_, -1);
    held_ = std::exchange(other.held_, false);
    dir_ = std::move(other.dir_);
  }
  return *this;
}

DirectoryLock::~DirectoryLock() { release(); }

void DirectoryLock::release() noexcept {
  if (fd_ < 0) return;
  // Removed while still held, so the next writer finds a fresh file or none; only
  // if it is still ours (a person may have deleted it, and another run made a new one).
  const fs::path file = dir_ / kLockFileName;
  if (same_file(fd_, file)) ::unlink(file.c_str());
  ::close(fd_);
  fd_ = -1;
  held_ = false;
}

}  // namespace gputrain
