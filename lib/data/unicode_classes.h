// The character classes GPT-2's pre-tokenizer pattern distinguishes:
// letters (\p{L}), numbers (\p{N}), white space (\s) and everything else.
// Tables are generated from the Unicode database (scripts/dev/gen_unicode_classes.py)
// so tokenization needs no regex engine and no ICU.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace gputrain {

enum class CharClass : uint8_t { kLetter, kNumber, kSpace, kOther };

CharClass char_class(char32_t cp);

// The code point starting at byte i of s (i < s.size()) and its length in
// bytes. A byte that does not start valid UTF-8 is returned as itself with
// length 1 (class kOther for bytes >= 0x80), so any input can be tokenized.
char32_t decode_utf8(std::string_view s, size_t i, size_t& len);

// Class and length of the character at byte i, with an ASCII fast path.
inline CharClass class_at(std::string_view s, size_t i, size_t& len) {
  const auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) {
    len = 1;
    if ((b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z')) return CharClass::kLetter;
    if (b >= '0' && b <= '9') return CharClass::kNumber;
    if (b == ' ' || (b >= 0x09 && b <= 0x0D)) return CharClass::kSpace;
    return CharClass::kOther;
  }
  const char32_t cp = decode_utf8(s, i, len);
  return len == 1 ? CharClass::kOther : char_class(cp);  // len 1 here = a byte that is not UTF-8
}

}  // namespace gputrain
