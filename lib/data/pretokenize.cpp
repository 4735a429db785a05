#include "data/pretokenize.h"

#include "data/unicode_classes.h"

namespace gputrain {
namespace {

// End of the run of characters of class `c` starting at byte i.
size_t run_end(std::string_view s, size_t i, CharClass c) {
  size_t len = 0;
  while (i < s.size() && class_at(s, i, len) == c) i += len;
  return i;
}

// Length of a contraction ('s 't 're 've 'm 'll 'd) at byte i, or 0.
size_t contraction_at(std::string_view s, size_t i) {
  if (s[i] != '\'' || i + 1 >= s.size()) return 0;
  const char a = s[i + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 < s.size()) {
    const char b = s[i + 2];
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  }
  return 0;
}

}  // namespace

void gpt2_pretokenize(std::string_view s, std::vector<std::string_view>& out) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    size_t end;
    size_t len0 = 0;
    const CharClass c0 = class_at(s, i, len0);
    if (size_t k = contraction_at(s, i)) {
      end = i + k;
    } else if (s[i] == ' ' && i + 1 < n && class_at(s, i + 1, len0) != CharClass::kSpace) {
      // " ?\p{L}+", " ?\p{N}+" or " ?[^\s\p{L}\p{N}]+" with the leading space.
      size_t len1 = 0;
      end = run_end(s, i + 1, class_at(s, i + 1, len1));
    } else if (c0 != CharClass::kSpace) {
      end = run_end(s, i, c0);
    } else {
      // "\s+(?!\S)" leaves the last white space before a non-space character
      // to start the next piece (" word"); a single one falls to "\s+".
      end = run_end(s, i, CharClass::kSpace);
      if (end < n) {
        size_t last = end - 1;  // start of the run's last character
        while (last > i && (static_cast<unsigned char>(s[last]) & 0xC0) == 0x80) --last;
        if (last > i) end = last;
      }
    }
    out.push_back(s.substr(i, end - i));
    i = end;
  }
}

size_t safe_split_point(std::string_view s, size_t target, size_t window) {
  const size_t stop = std::min(s.size(), target + window);
  size_t len = 0;
  for (size_t i = std::max<size_t>(target, 2); i < stop; ++i) {
    if (s[i - 1] != '\n') continue;
    // "x\ny": the '\n' is a piece of its own and "y..." starts a new one.
    if (class_at(s, i, len) == CharClass::kSpace) continue;
    size_t before = i - 2;
    while (before > 0 && (static_cast<unsigned char>(s[before]) & 0xC0) == 0x80) --before;
    if (class_at(s, before, len) == CharClass::kSpace) continue;
    return i;
  }
  return std::string_view::npos;
}

}  // namespace gputrain
