// GPT-2's byte-level alphabet: every byte is written as a printable code
// point in byte-level BPE vocabularies (GPT-2, Llama 3, Qwen2): printable
// Latin-1 bytes stand for themselves, the other 68 bytes are shifted to
// U+0100 and up, in byte order ("Ġ" = U+0120 is the space).
#pragma once
#include <array>
#include <string>

namespace gputrain {

// The UTF-8 of byte b's code point.
const std::array<std::string, 256>& byte_level_chars();
// The byte a code point of the alphabet stands for, or -1.
int byte_of_byte_level_char(char32_t c);

}  // namespace gputrain
