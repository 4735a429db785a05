#include "data/pre_tokenizer.h"

#include <algorithm>
#include <functional>

#include "data/byte_level_alphabet.h"
#include "data/pretokenize.h"
#include "data/unicode_properties.h"
#include "util/error.h"

namespace gputrain {
namespace {

using Ranges = std::vector<std::pair<size_t, size_t>>;

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

Behavior behavior_field(const nlohmann::json& j, const JsonPlace& place, const std::string& fallback) {
  const std::string b = string_field(j, "behavior", place, fallback);
  if (b == "Removed") return Behavior::kRemoved;
  if (b == "Isolated") return Behavior::kIsolated;
  if (b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::kMergedWithNext;
  if (b == "Contiguous") return Behavior::kContiguous;
  bad_field(place, "behavior",
            "is \"" + b + "\", not Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous");
}

// Cuts `seg` at the `matches` the way tokenizers' NormalizedString::split does.
void split_at(const TextSegment& seg, const Ranges& matches, Behavior behavior, bool invert,
              std::vector<TextSegment>& out) {
  struct Part {
    size_t b, e;
    bool match;
  };
  const size_t n = seg.text.size();
  std::vector<Part> parts;
  size_t prev = 0;
  for (auto [b, e] : matches) {
    if (b > prev) parts.push_back({prev, b, false});
    parts.push_back({b, e, true});
    prev = e;
  }
  if (prev < n) parts.push_back({prev, n, false});
  if (invert)
    for (auto& p : parts) p.match = !p.match;
  std::vector<Part> kept;
  bool previous_match = false;
  switch (behavior) {
    case Behavior::kRemoved:
      for (const auto& p : parts)
        if (!p.match) kept.push_back(p);
      break;
    case Behavior::kIsolated:
      kept = parts;
      break;
    case Behavior::kMergedWithPrevious:
      for (const auto& p : parts) {
        if (p.match && !previous_match && !kept.empty()) {
          kept.back().e = p.e;
        } else {
          kept.push_back(p);
        }
        previous_match = p.match;
      }
      break;
    case Behavior::kMergedWithNext:
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->match && !previous_match && !kept.empty()) {
          kept.back().b = it->b;
        } else {
          kept.push_back(*it);
        }
        previous_match = it->match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    case Behavior::kContiguous:
      for (const auto& p : parts) {
        if (p.match == previous_match && !kept.empty()) {
          kept.back().e = p.e;
        } else {
          kept.push_back(p);
        }
        previous_match = p.match;
      }
      break;
  }
  for (const auto& p : kept)
    if (p.e > p.b) out.push_back({seg.text.substr(p.b, p.e - p.b), seg.at_start && p.b == 0});
}

// Every character for which `pred` holds is a match of its own.
void char_matches(std::string_view s, const std::function<bool(char32_t)>& pred, Ranges& out) {
  for (size_t i = 0, len = 0; i < s.size(); i += len)
    if (pred(next_code_point(s, i, len))) out.emplace_back(i, i + len);
}

// Applies `cut` (text -> matches) to every segment with one behaviour.
class MatchSplitter : public PreTokenizer {
 public:
  using Finder = std::function<void(std::string_view, Ranges&)>;
  MatchSplitter(Finder find, Behavior behavior, bool invert)
      : find_(std::move(find)), behavior_(behavior), invert_(invert) {}
  void split(std::vector<TextSegment>& segments) const override {
    std::vector<TextSegment> out;
    Ranges m;
    for (const auto& seg : segments) {
      m.clear();
      find_(seg.text, m);
      split_at(seg, m, behavior_, invert_, out);
    }
    segments = std::move(out);
  }

 private:
  Finder find_;
  Behavior behavior_;
  bool invert_;
};

class ByteLevel : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, bool use_regex) : add_prefix_space_(add_prefix_space), use_regex_(use_regex) {}
  void split(std::vector<TextSegment>& segments) const override {
    const auto& chars = byte_level_chars();
    std::vector<TextSegment> out;
    std::vector<std::string_view> pieces;
    std::string spaced;
    for (const auto& seg : segments) {
      std::string_view text = seg.text;
      if (add_prefix_space_ && (text.empty() || text[0] != ' ')) {
        spaced = " " + seg.text;
        text = spaced;
      }
      pieces.clear();
      if (use_regex_) {
        gpt2_pretokenize(text, pieces);
      } else if (!text.empty()) {
        pieces.push_back(text);
      }
      for (std::string_view p : pieces) {
        TextSegment t{std::string(), seg.at_start && p.data() == text.data()};
        t.text.reserve(p.size() * 2);
        for (char c : p) t.text += chars[static_cast<unsigned char>(c)];
        out.push_back(std::move(t));
      }
    }
    segments = std::move(out);
  }
  bool splits_like_gpt2() const override { return use_regex_ && !add_prefix_space_; }

 private:
  bool add_prefix_space_, use_regex_;
};

class Metaspace : public PreTokenizer {
 public:
  enum class Prepend { kAlways, kFirst, kNever };
  Metaspace(std::string replacement, Prepend prepend, bool split)
      : replacement_(std::move(replacement)), prepend_(prepend), split_(split) {}
  void split(std::vector<TextSegment>& segments) const override {
    std::vector<TextSegment> out;
    Ranges m;
    for (auto& seg : segments) {
      std::string text;
      text.reserve(seg.text.size() + replacement_.size());
      for (char c : seg.text) c == ' ' ? text += replacement_ : text += c;
      const bool starts = text.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts && (prepend_ == Prepend::kAlways || (prepend_ == Prepend::kFirst && seg.at_start)))
        text.insert(0, replacement_);
      TextSegment replaced{std::move(text), seg.at_start};
      if (!split_) {
        if (!replaced.text.empty()) out.push_back(std::move(replaced));
        continue;
      }
      m.clear();
      const std::string_view t = replaced.text;
      for (size_t at = t.find(replacement_); at != std::string_view::npos; at = t.find(replacement_, at + 1))
        m.emplace_back(at, at + replacement_.size());
      split_at(replaced, m, Behavior::kMergedWithNext, false, out);
    }
    segments = std::move(out);
  }

 private:
  std::string replacement_;
  Prepend prepend_;
  bool split_;
};

class PreTokenizerSequence : public PreTokenizer {
 public:
  explicit PreTokenizerSequence(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void split(std::vector<TextSegment>& segments) const override {
    for (const auto& p : parts_) p->split(segments);
  }
  bool splits_like_gpt2() const override { return parts_.size() == 1 && parts_[0]->splits_like_gpt2(); }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

std::unique_ptr<PreTokenizer> whitespace_split() {
  return std::make_unique<MatchSplitter>([](std::string_view s, Ranges& m) { char_matches(s, is_white_space, m); },
                                         Behavior::kRemoved, false);
}

std::unique_ptr<PreTokenizer> punctuation(Behavior b) {
  return std::make_unique<MatchSplitter>([](std::string_view s, Ranges& m) { char_matches(s, is_punctuation, m); }, b,
                                         false);
}

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j, const JsonPlace& place) {
  if (j.is_null()) return nullptr;
  const std::string type = component_type(j, place);
  const JsonPlace here = place.child(" (" + type + ")");
  if (type == "ByteLevel")
    return std::make_unique<ByteLevel>(bool_field(j, "add_prefix_space", here, true),
                                       bool_field(j, "use_regex", here, true));
  if (type == "Split") {
    auto pattern = std::make_shared<TextPattern>(j.value("pattern", nlohmann::json()), here);
    return std::make_unique<MatchSplitter>([pattern](std::string_view s, Ranges& m) { pattern->find_all(s, m); },
                                           behavior_field(j, here, "Isolated"), bool_field(j, "invert", here, false));
  }
  if (type == "Metaspace") {
    std::string scheme = string_field(j, "prepend_scheme", here, "");
    if (scheme.empty()) scheme = bool_field(j, "add_prefix_space", here, true) ? "always" : "never";
    Metaspace::Prepend prepend;
    if (scheme == "always") {
      prepend = Metaspace::Prepend::kAlways;
    } else if (scheme == "first") {
      prepend = Metaspace::Prepend::kFirst;
    } else if (scheme == "never") {
      prepend = Metaspace::Prepend::kNever;
    } else {
      bad_field(here, "prepend_scheme", "is \"" + scheme + "\", not always, first or never");
    }
    const std::string replacement = string_field(j, "replacement", here, "\xE2\x96\x81");
    if (replacement.empty()) bad_field(here, "replacement", "is empty");
    return std::make_unique<Metaspace>(replacement, prepend, bool_field(j, "split", here, true));
  }
  if (type == "Digits") {
    const bool individual = bool_field(j, "individual_digits", here, false);
    return std::make_unique<MatchSplitter>([](std::string_view s, Ranges& m) { char_matches(s, is_numeric, m); },
                                           individual ? Behavior::kIsolated : Behavior::kContiguous, false);
  }
  if (type == "Punctuation") return punctuation(behavior_field(j, here, "Isolated"));
  if (type == "WhitespaceSplit") return whitespace_split();
  if (type == "Whitespace") {
    auto words = std::make_shared<PcreRegex>("\\w+|[^\\w\\s]+", here.describe());
    return std::make_unique<MatchSplitter>([words](std::string_view s, Ranges& m) { words->find_all(s, m); },
                                           Behavior::kRemoved, true);
  }
  if (type == "BertPreTokenizer") {
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    parts.push_back(whitespace_split());
    parts.push_back(punctuation(Behavior::kIsolated));
    return std::make_unique<PreTokenizerSequence>(std::move(parts));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    const auto& list = array_field(j, "pretokenizers", here);
    for (size_t i = 0; i < list.size(); ++i) {
      auto p = make_pre_tokenizer(list[i], place.child(".pretokenizers[" + std::to_string(i) + "]"));
      if (p) parts.push_back(std::move(p));
    }
    return std::make_unique<PreTokenizerSequence>(std::move(parts));
  }
  refuse_component(here, "pre-tokenizer",
                   "ByteLevel, Split, Metaspace, Digits, Punctuation, Whitespace, WhitespaceSplit, BertPreTokenizer, "
                   "Sequence");
}

}  // namespace gputrain
