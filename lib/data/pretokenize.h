// GPT-2's pre-tokenizer: splits text into the pieces BPE merges within, as
// the pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// does (the same pattern HF tokenizers' ByteLevel pre-tokenizer uses),
// written as a hand scanner: no regex engine, one pass, no allocation per piece.
#pragma once
#include <string_view>
#include <vector>

namespace gputrain {

// Appends the pieces of `text` to `out` (views into `text`).
void gpt2_pretokenize(std::string_view text, std::vector<std::string_view>& out);

// A byte offset near `target` where `text` can be cut so that the pieces of
// the two halves are exactly the pieces of the whole: just after a '\n' whose
// neighbours are not white space. Returns npos if there is none in
// [target, target + window).
size_t safe_split_point(std::string_view text, size_t target, size_t window);

}  // namespace gputrain
