#include "data/token_decoder.h"

#include <functional>

#include "data/byte_level_alphabet.h"
#include "data/unicode_properties.h"
#include "data/utf8_repair.h"

namespace gputrain {
namespace {

using Tokens = std::vector<std::string>;

class FunctionDecoder : public TokenDecoder {
 public:
  explicit FunctionDecoder(std::function<void(Tokens&)> f) : f_(std::move(f)) {}
  void apply(Tokens& t) const override { f_(t); }

 private:
  std::function<void(Tokens&)> f_;
};

std::string join(const Tokens& t) {
  std::string s;
  for (const auto& x : t) s += x;
  return s;
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

void byte_level(Tokens& t) {
  const std::string joined = join(t);
  std::string bytes;
  for (size_t i = 0, len = 0; i < joined.size(); i += len) {
    const char32_t c = next_code_point(joined, i, len);
    const int b = byte_of_byte_level_char(c);
    if (b >= 0) {
      bytes.push_back(static_cast<char>(b));
    } else {
      bytes.append(joined, i, len);
    }
  }
  t.assign(1, bytes);
}

// "<0x41>" -> 0x41, else -1.
int fallback_byte(const std::string& s) {
  if (s.size() != 6 || s.compare(0, 3, "<0x") != 0 || s[5] != '>') return -1;
  int v = 0;
  for (int k = 3; k < 5; ++k) {
    const char c = s[k];
    if (c >= '0' && c <= '9') {
      v = v * 16 + (c - '0');
    } else if (c >= 'A' && c <= 'F') {
      v = v * 16 + (c - 'A' + 10);
    } else {
      return -1;
    }
  }
  return v;
}

void byte_fallback(Tokens& t) {
  Tokens out;
  std::string bytes;
  auto flush = [&] {
    if (bytes.empty()) return;
    if (valid_utf8_prefix(bytes) == bytes.size()) {
      out.push_back(bytes);
    } else {
      for (size_t i = 0; i < bytes.size(); ++i) out.emplace_back("\xEF\xBF\xBD");
    }
    bytes.clear();
  };
  for (auto& s : t) {
    const int b = fallback_byte(s);
    if (b >= 0) {
      bytes.push_back(static_cast<char>(b));
    } else {
      flush();
      out.push_back(std::move(s));
    }
  }
  flush();
  t = std::move(out);
}

std::unique_ptr<TokenDecoder> make(std::function<void(Tokens&)> f) {
  return std::make_unique<FunctionDecoder>(std::move(f));
}

}  // namespace

std::unique_ptr<TokenDecoder> make_decoder(const nlohmann::json& j, const JsonPlace& place) {
  if (j.is_null()) return nullptr;
  const std::string type = component_type(j, place);
  const JsonPlace here = place.child(" (" + type + ")");
  if (type == "ByteLevel") return make(byte_level);
  if (type == "ByteFallback") return make(byte_fallback);
  if (type == "Fuse") return make([](Tokens& t) { t.assign(1, join(t)); });
  if (type == "Metaspace") {
    const std::string rep = string_field(j, "replacement", here, "\xE2\x96\x81");
    std::string scheme = string_field(j, "prepend_scheme", here, "");
    if (scheme.empty()) scheme = bool_field(j, "add_prefix_space", here, true) ? "always" : "never";
    const bool strip_first = scheme != "never";
    return make([rep, strip_first](Tokens& t) {
      for (size_t i = 0; i < t.size(); ++i) {
        replace_all(t[i], rep, " ");
        if (i == 0 && strip_first && !t[i].empty() && t[i][0] == ' ') t[i].erase(0, 1);
      }
    });
  }
  if (type == "Replace") {
    auto pattern = std::make_shared<TextPattern>(j.value("pattern", nlohmann::json()), here);
    const std::string content = string_field(j, "content", here, "");
    return make([pattern, content](Tokens& t) {
      std::vector<std::pair<size_t, size_t>> m;
      for (auto& s : t) {
        m.clear();
        pattern->find_all(s, m);
        std::string out;
        size_t at = 0;
        for (auto [b, e] : m) out.append(s, at, b - at).append(content), at = e;
        s = out.append(s, at, std::string::npos);
      }
    });
  }
  if (type == "Strip") {
    const std::string content = string_field(j, "content", here, " ");
    const int64_t start = int_field(j, "start", here, 0), stop = int_field(j, "stop", here, 0);
    return make([content, start, stop](Tokens& t) {
      for (auto& s : t) {
        for (int64_t k = 0; k < start && s.compare(0, content.size(), content) == 0; ++k) s.erase(0, content.size());
        for (int64_t k = 0; k < stop && s.size() >= content.size() &&
                            s.compare(s.size() - content.size(), content.size(), content) == 0;
             ++k)
          s.erase(s.size() - content.size());
      }
    });
  }
  if (type == "BPEDecoder") {
    const std::string suffix = string_field(j, "suffix", here, "</w>");
    return make([suffix](Tokens& t) {
      for (size_t i = 0; i < t.size(); ++i) replace_all(t[i], suffix, i + 1 == t.size() ? "" : " ");
    });
  }
  if (type == "Sequence") {
    std::vector<std::shared_ptr<TokenDecoder>> parts;
    const auto& list = array_field(j, "decoders", here);
    for (size_t i = 0; i < list.size(); ++i)
      if (auto d = make_decoder(list[i], place.child(".decoders[" + std::to_string(i) + "]")))
        parts.push_back(std::move(d));
    return make([parts](Tokens& t) {
      for (const auto& p : parts) p->apply(t);
    });
  }
  refuse_component(here, "decoder", "ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, BPEDecoder, Sequence");
}

}  // namespace gputrain
