#include "util/crc32c.h"

#include <array>
#include <cstdio>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

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

#if defined(__x86_64__)
// Compiled for SSE4.2 whatever the build's target; called only where the CPU has it.
__attribute__((target("sse4.2"))) uint32_t update_sse42(uint32_t crc, const uint8_t* p, size_t n) {
  for (; n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0; --n) crc = _mm_crc32_u8(crc, *p++);
  uint64_t c = crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
  }
  crc = static_cast<uint32_t>(c);
  for (; n > 0; --n) crc = _mm_crc32_u8(crc, *p++);
  return crc;
}

bool cpu_has_sse42() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

constexpr uint32_t kPolynomial = 0x82f63b78u;  // reflected

// a * b modulo the polynomial, in the reflected bit order (x^0 is the top bit), as zlib's multmodp;
// `a` is never 0 here (powers of x), where the loop would not end.
uint32_t multiply_mod_p(uint32_t a, uint32_t b) {
  uint32_t m = 1u << 31, p = 0;
  for (;;) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = (b & 1) ? (b >> 1) ^ kPolynomial : b >> 1;
  }
  return p;
}

// x^(n * 2^k) modulo the polynomial, from the powers x^(2^i) (zlib's x2nmodp).
uint32_t x_power_mod_p(uint64_t n, unsigned k) {
  static const std::array<uint32_t, 32> x2n = [] {
    std::array<uint32_t, 32> out{};
    uint32_t p = 1u << 30;  // x^1
    out[0] = p;
    for (size_t i = 1; i < out.size(); ++i) out[i] = p = multiply_mod_p(p, p);
    return out;
  }();
  uint32_t p = 1u << 31;  // x^0
  for (; n != 0; n >>= 1, ++k)
    if (n & 1) p = multiply_mod_p(x2n[k & 31], p);
  return p;
}

}  // namespace

uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t length_b) {
  return multiply_mod_p(x_power_mod_p(length_b, 3), crc_a) ^ crc_b;  // A shifted past B's 8 * length_b bits
}

uint32_t crc32c_update_bytewise(uint32_t crc, const void* data, size_t n) {
  const auto& t = table();
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) crc = t[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc;
}

void Crc32c::update(const void* data, size_t n) {
#if defined(__x86_64__)
  if (cpu_has_sse42()) {
    state_ = update_sse42(state_, static_cast<const uint8_t*>(data), n);
    return;
  }
#endif
  state_ = crc32c_update_bytewise(state_, data, n);
}

std::string Crc32c::hex() const { return crc32c_hex(value()); }

std::string crc32c_hex(uint32_t crc) {
  char out[9];
  std::snprintf(out, sizeof out, "%08x", crc);
  return out;
}

}  // namespace gputrain
