#include "util/crc32c.h"

#include <array>

namespace gputrain {
namespace {

const std::array<uint32_t, 256>& table() {
  static const std::array<uint32_t, 256> t = [] {
    std::array<uint32_t, 256> out{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;  // reflected polynomial
      out[i] = c;
    }
    return out;
  }();
  return t;
}

}  // namespace

void Crc32c::update(const void* data, size_t n) {
  const auto& t = table();
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t crc = state_;
  for (size_t i = 0; i < n; ++i) crc = t[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  state_ = crc;
}

}  // namespace gputrain
