// Text from files is bytes; Hugging Face tokenizers and SentencePiece take
// Unicode strings. Invalid UTF-8 is made valid the way Python's
// bytes.decode("utf-8", errors="replace") does it (each maximal ill-formed
// subsequence becomes one U+FFFD), so our ids equal theirs on such input.
#pragma once
#include <string>
#include <string_view>

namespace gputrain {

// Length of the valid UTF-8 prefix of `s` (s.size() when all of it is valid).
size_t valid_utf8_prefix(std::string_view s);

// `s` with every ill-formed subsequence replaced by U+FFFD; returns a view of
// `s` itself when it is valid, else of `scratch`, which holds the repaired copy.
std::string_view repair_utf8(std::string_view s, std::string& scratch);

}  // namespace gputrain
