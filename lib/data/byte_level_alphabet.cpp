#include "data/byte_level_alphabet.h"

#include <vector>

#include "data/unicode_properties.h"

namespace gputrain {
namespace {

bool printable(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

}  // namespace

const std::array<std::string, 256>& byte_level_chars() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    int shifted = 0;
    for (int b = 0; b < 256; ++b) append_utf8(static_cast<char32_t>(printable(b) ? b : 0x100 + shifted++), t[b]);
    return t;
  }();
  return table;
}

int byte_of_byte_level_char(char32_t c) {
  static const std::vector<int> table = [] {
    std::vector<int> t(0x200, -1);
    int shifted = 0;
    for (int b = 0; b < 256; ++b) t[printable(b) ? b : 0x100 + shifted++] = b;
    return t;
  }();
  return c < table.size() ? table[c] : -1;
}

}  // namespace gputrain
