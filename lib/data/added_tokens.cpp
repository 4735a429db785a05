#include "data/added_tokens.h"

#include "data/unicode_properties.h"

namespace gputrain {
namespace {

bool is_word_char(char32_t c) {
  return c == '_' || (c < 0x80 ? ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') || (c >= '0' && c <= '9')
                               : !is_white_space(c) && !is_punctuation(c));
}

}  // namespace

void AddedTokenMatcher::split(std::string_view text, std::vector<Part>& out) const {
  // Each token's next acceptable occurrence at or after `pos`, found once and
  // reused until passed, so the scan stays linear in the text.
  constexpr size_t kNone = std::string_view::npos;
  std::vector<size_t> next(tokens_.size(), 0);
  std::vector<bool> searched(tokens_.size(), false);
  auto occurrence = [&](size_t k, size_t from) {
    const AddedToken& t = tokens_[k];
    for (size_t at = text.find(t.content, from); at != kNone; at = text.find(t.content, at + 1)) {
      const size_t end = at + t.content.size();
      size_t unused = 0, len = 0;
      if (t.single_word && ((at > 0 && is_word_char(code_point_before(text, at, unused))) ||
                            (end < text.size() && is_word_char(next_code_point(text, end, len)))))
        continue;
      return at;
    }
    return kNone;
  };
  size_t pos = 0;
  while (pos < text.size()) {
    size_t best = kNone, best_len = 0;
    const AddedToken* tok = nullptr;
    for (size_t k = 0; k < tokens_.size(); ++k) {
      if (!searched[k] || (next[k] != kNone && next[k] < pos)) next[k] = occurrence(k, pos), searched[k] = true;
      const size_t len = tokens_[k].content.size();
      if (next[k] != kNone && (next[k] < best || (next[k] == best && len > best_len)))
        best = next[k], best_len = len, tok = &tokens_[k];
    }
    if (!tok) break;
    size_t b = best, e = best + best_len, len = 0;
    if (tok->lstrip)
      while (b > pos) {
        size_t start = 0;
        if (!is_white_space(code_point_before(text, b, start))) break;
        b = start;
      }
    if (tok->rstrip)
      while (e < text.size() && is_white_space(next_code_point(text, e, len))) e += len;
    if (b > pos) out.push_back({text.substr(pos, b - pos), -1});
    out.push_back({std::string_view(), tok->id});
    pos = e;
  }
  if (pos < text.size()) out.push_back({text.substr(pos), -1});
}

}  // namespace gputrain
