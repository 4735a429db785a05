#include "util/positioned_io.h"

#include <unistd.h>

#include <cerrno>

namespace gputrain {

bool pread_all(int fd, void* to, size_t n, uint64_t offset, IoFailure& failed) {
  auto* p = static_cast<char*>(to);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      failed = {got == 0 ? 0 : errno, offset};
      return false;
    }
    p += got, offset += static_cast<uint64_t>(got), n -= static_cast<size_t>(got);
  }
  return true;
}

bool pwrite_all(int fd, const void* from, size_t n, uint64_t offset, IoFailure& failed) {
  const auto* p = static_cast<const char*>(from);
  while (n > 0) {
    const ssize_t put = ::pwrite(fd, p, n, static_cast<off_t>(offset));
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) {
      failed = {put == 0 ? EIO : errno, offset};
      return false;
    }
    p += put, offset += static_cast<uint64_t>(put), n -= static_cast<size_t>(put);
  }
  return true;
}

}  // namespace gputrain
