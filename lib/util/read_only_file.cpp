#include "util/read_only_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/error.h"

namespace gputrain {

ReadOnlyFile::ReadOnlyFile(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st {};
  if (fd_ < 0 || ::fstat(fd_, &st) != 0)
    throw data_error("cannot open '" + path_ + "': " + std::strerror(errno) +
                     "\n    fix: check the path and that the file is readable");
  size_ = static_cast<uint64_t>(st.st_size);
}

ReadOnlyFile::~ReadOnlyFile() {
  if (fd_ >= 0) ::close(fd_);
}

void ReadOnlyFile::read(void* to, size_t n, uint64_t offset) const {
  auto* p = static_cast<char*>(to);
  while (n > 0) {
    const ssize_t got = ::pread(fd_, p, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      throw data_error("cannot read '" + path_ + "' at byte " + std::to_string(offset) + ": " +
                       (got == 0 ? std::string("the file ends there (truncated?)") : std::strerror(errno)) +
                       "\n    fix: use another copy of the file");
    p += got, offset += static_cast<uint64_t>(got), n -= static_cast<size_t>(got);
  }
}

}  // namespace gputrain
