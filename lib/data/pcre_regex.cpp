#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/pcre_regex.h"

#include <pcre2.h>

#include "util/error.h"

namespace gputrain {

struct PcreRegex::Compiled {
  pcre2_code* code = nullptr;
  bool jit = false;
};

namespace {

// Per thread: match data and a JIT stack big enough for long runs of white
// space under lookahead (the default 32 KiB is not).
struct ThreadMatchState {
  pcre2_match_data* data = nullptr;
  pcre2_jit_stack* stack = nullptr;
  pcre2_match_context* context = nullptr;
  ThreadMatchState() {
    data = pcre2_match_data_create(4, nullptr);
    stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    context = pcre2_match_context_create(nullptr);
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~ThreadMatchState() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
};

// Oniguruma's Unicode \w (what tokenizers' patterns mean) also takes marks
// and the joiners; PCRE2 10.42's takes letters, digits and '_' only.
constexpr const char* kWordClass = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}";

std::string with_oniguruma_word_class(const std::string& p) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      if (e == 'w') {
        out += in_class ? std::string(kWordClass) : "[" + std::string(kWordClass) + "]";
      } else if (e == 'W' && !in_class) {
        out += "[^" + std::string(kWordClass) + "]";
      } else {
        out += c, out += e;
      }
      ++i;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // a literal ']' first in the class
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

std::string pcre_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

PcreRegex::PcreRegex(const std::string& pattern, const std::string& where)
    : pattern_(pattern), c_(std::make_unique<Compiled>()) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  const std::string translated = with_oniguruma_word_class(pattern);
  c_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(), PCRE2_UTF | PCRE2_UCP,
                           &err, &offset, nullptr);
  if (!c_->code)
    throw data_error(where + ": the regular expression " + pattern + " does not compile at offset " +
                     std::to_string(offset) + ": " + pcre_message(err) +
                     "\n    fix: the pattern must be a regex the Hugging Face tokenizers library accepts");
  c_->jit = pcre2_jit_compile(c_->code, PCRE2_JIT_COMPLETE) == 0;
}

PcreRegex::~PcreRegex() {
  if (c_ && c_->code) pcre2_code_free(c_->code);
}

void PcreRegex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  thread_local ThreadMatchState state;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start <= text.size()) {
    const int rc =
        c_->jit ? pcre2_jit_match(c_->code, subject, text.size(), start, 0, state.data, state.context)
                : pcre2_match(c_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, state.data, state.context);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0)
      throw data_error("matching the tokenizer's regular expression " + pattern_ + " failed: " + pcre_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(state.data);
    const size_t b = ov[0], e = ov[1];
    if (e > b) {
      out.emplace_back(b, e);
      start = e;
    } else {  // an empty match: step over one character
      if (b >= text.size()) return;
      start = b + 1;
      while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) ++start;
    }
  }
}

}  // namespace gputrain
