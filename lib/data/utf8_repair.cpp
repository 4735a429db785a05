#include "data/utf8_repair.h"

#include <cstdint>

namespace gputrain {
namespace {

// Bytes of the well-formed sequence starting at s[i], or, when it is
// ill-formed, -(the length of its maximal subpart), which is at least 1
// (Unicode 15, table 3-7; what Python's "replace" error handler follows).
int sequence_at(std::string_view s, size_t i) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) return 1;
  int need;
  uint8_t lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
  } else {
    return -1;
  }
  for (int k = 1; k < need; ++k) {
    if (i + k >= s.size()) return -k;
    const auto b = static_cast<uint8_t>(s[i + k]);
    if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return -k;
  }
  return need;
}

}  // namespace

size_t valid_utf8_prefix(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const int n = sequence_at(s, i);
    if (n < 0) return i;
    i += static_cast<size_t>(n);
  }
  return i;
}

std::string_view repair_utf8(std::string_view s, std::string& scratch) {
  size_t i = valid_utf8_prefix(s);
  if (i == s.size()) return s;
  scratch.assign(s.substr(0, i));
  while (i < s.size()) {
    const int n = sequence_at(s, i);
    if (n > 0) {
      scratch.append(s.substr(i, static_cast<size_t>(n)));
      i += static_cast<size_t>(n);
    } else {
      scratch.append("\xEF\xBF\xBD");
      i += static_cast<size_t>(-n);
    }
  }
  return scratch;
}

}  // namespace gputrain
