#include "data/unicode_classes.h"

#include <algorithm>
#include <iterator>

namespace gputrain {
namespace {

struct CodepointRange {
  char32_t lo, hi;
};

#include "data/unicode_classes_table.inc"

template <size_t N>
bool in_ranges(const CodepointRange (&ranges)[N], char32_t cp) {
  auto it = std::upper_bound(std::begin(ranges), std::end(ranges), cp,
                             [](char32_t c, const CodepointRange& r) { return c < r.lo; });
  return it != std::begin(ranges) && cp <= std::prev(it)->hi;
}

}  // namespace

CharClass char_class(char32_t cp) {
  if (in_ranges(kLetterRanges, cp)) return CharClass::kLetter;
  if (in_ranges(kNumberRanges, cp)) return CharClass::kNumber;
  if (in_ranges(kWhiteSpaceRanges, cp)) return CharClass::kSpace;
  return CharClass::kOther;
}

char32_t decode_utf8(std::string_view s, size_t i, size_t& len) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  len = 1;
  if (b0 < 0x80) return b0;
  size_t n;
  char32_t cp, min;
  if ((b0 & 0xE0) == 0xC0) n = 2, cp = b0 & 0x1F, min = 0x80;
  else if ((b0 & 0xF0) == 0xE0) n = 3, cp = b0 & 0x0F, min = 0x800;
  else if ((b0 & 0xF8) == 0xF0) n = 4, cp = b0 & 0x07, min = 0x10000;
  else return b0;  // continuation byte or invalid lead byte
  if (i + n > s.size()) return b0;
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return b0;
    cp = (cp << 6) | (b & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are not valid UTF-8.
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return b0;
  len = n;
  return cp;
}

}  // namespace gputrain
