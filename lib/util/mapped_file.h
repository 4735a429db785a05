// A read-only memory map of a whole file: token files are paged in on demand,
// never read into RAM as a whole.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace gputrain {

class MappedFile {
 public:
  explicit MappedFile(const std::string& path);  // throws a data Error naming the path
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace gputrain
