// CRC-32C (Castagnoli), computed incrementally so a file's checksum can be
// taken while it is written instead of reading it back. On x86-64 with
// SSE4.2 (every server CPU since 2008) it uses the crc32 instruction, about
// 20x the table loop's speed, so checksumming a multi-GB checkpoint costs
// little next to writing it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace gputrain {

class Crc32c {
 public:
  void update(const void* data, size_t n);
  uint32_t value() const { return ~state_; }
  std::string hex() const;  // value() as 8 lowercase hex digits, how files and fingerprints record it

 private:
  uint32_t state_ = 0xffffffffu;
};

// `crc` as 8 lowercase hex digits.
std::string crc32c_hex(uint32_t crc);

// The CRC-32C of A followed by B from A's and B's (B `length_b` bytes long), as zlib's crc32_combine
// does for CRC-32: checksums of pieces taken apart (by different processes) join into the whole's.
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t length_b);

// The byte-at-a-time table version of Crc32c::update's inner step (the
// reference the fast path is tested against): the new raw state.
uint32_t crc32c_update_bytewise(uint32_t state, const void* data, size_t n);

}  // namespace gputrain
