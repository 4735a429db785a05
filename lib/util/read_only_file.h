// A file read at byte offsets (pread), not mapped: only what is read is in memory, and mapped pages
// would count in the resident set that per-rank memory checks measure.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace gputrain {

class ReadOnlyFile {
 public:
  explicit ReadOnlyFile(std::string path);  // DataError naming the path when it cannot be opened
  ~ReadOnlyFile();
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;

  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Exactly `n` bytes from `offset` into `to`; a DataError naming the file if they are not there.
  void read(void* to, size_t n, uint64_t offset) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

}  // namespace gputrain
