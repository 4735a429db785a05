#include "data/text_normalizer.h"

#include <utf8proc.h>

#include <cstdlib>

#include "data/unicode_properties.h"
#include "util/error.h"

namespace gputrain {
namespace {

bool is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

class UnicodeForm : public TextNormalizer {
 public:
  UnicodeForm(int options, bool ascii_unchanged) : options_(options), ascii_unchanged_(ascii_unchanged) {}
  void apply(std::string& s) const override {
    if (ascii_unchanged_ && is_ascii(s)) return;
    utf8proc_uint8_t* out = nullptr;
    const auto n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), static_cast<utf8proc_ssize_t>(s.size()), &out,
                     static_cast<utf8proc_option_t>(options_ | UTF8PROC_STABLE));
    if (n < 0) throw data_error(std::string("Unicode normalization failed: ") + utf8proc_errmsg(n));
    s.assign(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
    std::free(out);
  }

 private:
  int options_;
  bool ascii_unchanged_;
};

class Lowercase : public TextNormalizer {
 public:
  void apply(std::string& s) const override { s = lowercase(s); }
};

class Strip : public TextNormalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void apply(std::string& s) const override {
    size_t b = 0, e = s.size(), len = 0;
    if (left_)
      while (b < e && is_white_space(next_code_point(s, b, len))) b += len;
    if (right_)
      while (e > b) {
        size_t start = 0;
        if (!is_white_space(code_point_before(s, e, start))) break;
        e = start;
      }
    s = s.substr(b, e - b);
  }

 private:
  bool left_, right_;
};

class StripAccents : public TextNormalizer {
 public:
  void apply(std::string& s) const override {
    if (is_ascii(s)) return;
    std::string out;
    for (size_t i = 0, len = 0; i < s.size(); i += len) {
      const char32_t c = next_code_point(s, i, len);
      if (!is_nonspacing_mark(c)) out.append(s, i, len);
    }
    s = std::move(out);
  }
};

class Replace : public TextNormalizer {
 public:
  Replace(const nlohmann::json& j, const JsonPlace& place)
      : pattern_(j.value("pattern", nlohmann::json()), place), content_(string_field(j, "content", place, "")) {}
  void apply(std::string& s) const override {
    std::vector<std::pair<size_t, size_t>> m;
    pattern_.find_all(s, m);
    if (m.empty()) return;
    std::string out;
    size_t at = 0;
    for (auto [b, e] : m) {
      out.append(s, at, b - at);
      out += content_;
      at = e;
    }
    out.append(s, at, std::string::npos);
    s = std::move(out);
  }

 private:
  TextPattern pattern_;
  std::string content_;
};

class Prepend : public TextNormalizer {
 public:
  explicit Prepend(std::string p) : prepend_(std::move(p)) {}
  void apply(std::string& s) const override {
    if (!s.empty()) s.insert(0, prepend_);
  }

 private:
  std::string prepend_;
};

class NormalizerSequence : public TextNormalizer {
 public:
  explicit NormalizerSequence(std::vector<std::unique_ptr<TextNormalizer>> parts) : parts_(std::move(parts)) {}
  void apply(std::string& s) const override {
    for (const auto& p : parts_) p->apply(s);
  }

 private:
  std::vector<std::unique_ptr<TextNormalizer>> parts_;
};

}  // namespace

std::unique_ptr<TextNormalizer> make_normalizer(const nlohmann::json& j, const JsonPlace& place) {
  if (j.is_null()) return nullptr;
  const std::string type = component_type(j, place);
  const JsonPlace here = place.child(" (" + type + ")");
  if (type == "NFC") return std::make_unique<UnicodeForm>(UTF8PROC_COMPOSE, true);
  if (type == "NFD") return std::make_unique<UnicodeForm>(UTF8PROC_DECOMPOSE, true);
  if (type == "NFKC") return std::make_unique<UnicodeForm>(UTF8PROC_COMPOSE | UTF8PROC_COMPAT, true);
  if (type == "NFKD") return std::make_unique<UnicodeForm>(UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, true);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Strip")
    return std::make_unique<Strip>(bool_field(j, "strip_left", here, true), bool_field(j, "strip_right", here, true));
  if (type == "StripAccents") return std::make_unique<StripAccents>();
  if (type == "Replace") return std::make_unique<Replace>(j, here);
  if (type == "Prepend") return std::make_unique<Prepend>(string_field(j, "prepend", here, ""));
  if (type == "Sequence") {
    std::vector<std::unique_ptr<TextNormalizer>> parts;
    const auto& list = array_field(j, "normalizers", here);
    for (size_t i = 0; i < list.size(); ++i) {
      auto p = make_normalizer(list[i], place.child(".normalizers[" + std::to_string(i) + "]"));
      if (p) parts.push_back(std::move(p));
    }
    return std::make_unique<NormalizerSequence>(std::move(parts));
  }
  refuse_component(here, "normalizer",
                   "NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents, Replace, Prepend, Sequence");
}

}  // namespace gputrain
