// CRC-32C (Castagnoli), computed incrementally so a file's checksum can be
// taken while it is written instead of reading it back.
#pragma once
#include <cstddef>
#include <cstdint>

namespace gputrain {

class Crc32c {
 public:
  void update(const void* data, size_t n);
  uint32_t value() const { return ~state_; }

 private:
  uint32_t state_ = 0xffffffffu;
};

}  // namespace gputrain
