// Unicode character properties the tokenizer.json components test, as the
// Rust `tokenizers` library defines them, answered by utf8proc.
#pragma once
#include <string>
#include <string_view>

namespace gputrain {

bool is_white_space(char32_t c);      // Rust char::is_whitespace (the White_Space property)
bool is_numeric(char32_t c);          // Rust char::is_numeric: categories Nd, Nl, No
bool is_punctuation(char32_t c);      // ASCII punctuation or a P* category (tokenizers' Punctuation)
bool is_nonspacing_mark(char32_t c);  // category Mn (StripAccents)

// Appends the UTF-8 of `c` to `out`.
void append_utf8(char32_t c, std::string& out);
// Per-character lowercase (tokenizers' Lowercase: no context rules).
std::string lowercase(std::string_view s);

// The code point at byte i of valid UTF-8 `s` and its length.
char32_t next_code_point(std::string_view s, size_t i, size_t& len);
// The code point that ends just before byte `end` (end > 0) and the byte it starts at.
char32_t code_point_before(std::string_view s, size_t end, size_t& start);

}  // namespace gputrain
