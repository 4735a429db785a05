// A compiled regular expression (PCRE2, Unicode mode, JIT when available) for
// the Split pre-tokenizer and Replace normalizer of tokenizer.json files: the
// patterns there (\p{L}, \p{N}, lookahead, (?i:...)) are Oniguruma syntax,
// which PCRE2 reads the same way.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gputrain {

class PcreRegex {
 public:
  // Throws a data Error naming `where` when `pattern` does not compile.
  PcreRegex(const std::string& pattern, const std::string& where);
  ~PcreRegex();
  PcreRegex(const PcreRegex&) = delete;
  PcreRegex& operator=(const PcreRegex&) = delete;

  // Appends the [begin, end) byte ranges of the non-overlapping, non-empty
  // matches in `text` (valid UTF-8), leftmost first. Safe to call from
  // several threads at once.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Compiled;
  std::string pattern_;
  std::unique_ptr<Compiled> c_;
};

}  // namespace gputrain
