#include "util/read_only_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/error.h"
#include "util/positioned_io.h"

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
  IoFailure failed;
  if (!pread_all(fd_, to, n, offset, failed))
    throw data_error(
        "cannot read '" + path_ + "' at byte " + std::to_string(failed.at) + ": " +
        (failed.error == 0 ? std::string("the file ends there (truncated?)") : std::strerror(failed.error)) +
        "\n    fix: use another copy of the file");
}

}  // namespace gputrain
