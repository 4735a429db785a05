#include "data/bpe_tokenizer.h"

#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>

#include "data/byte_level_alphabet.h"
#include "data/pretokenize.h"
#include "data/unicode_classes.h"
#include "util/error.h"
#include "util/text_file.h"

namespace gputrain {
namespace {

// "Ġthe" -> " the" (byte_level_alphabet.h).
bool vocab_string_to_bytes(std::string_view s, std::string& out) {
  out.clear();
  for (size_t i = 0, len = 0; i < s.size(); i += len) {
    const char32_t cp = decode_utf8(s, i, len);
    const int b = byte_of_byte_level_char(cp);
    if (b < 0 || (len == 1 && cp >= 0x80)) return false;
    out.push_back(static_cast<char>(b));
  }
  return !out.empty();
}

class BpeEncoder : public TokenEncoder {
 public:
  explicit BpeEncoder(const BpeTokenizer& t) : t_(t) {}
  void encode(std::string_view text, std::vector<uint32_t>& out) override {
    pieces_.clear();
    gpt2_pretokenize(text, pieces_);
    for (std::string_view p : pieces_) {
      auto it = cache_.find(p);
      if (it == cache_.end()) {
        if (cache_.size() >= kMaxCached) cache_.clear();  // bounded memory on endless vocabularies
        std::vector<uint32_t> ids;
        t_.merge_word(p, ids);
        it = cache_.emplace(std::string(p), std::move(ids)).first;
      }
      out.insert(out.end(), it->second.begin(), it->second.end());
    }
  }

 private:
  static constexpr size_t kMaxCached = 1 << 20;
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  const BpeTokenizer& t_;
  std::vector<std::string_view> pieces_;
  std::unordered_map<std::string, std::vector<uint32_t>, Hash, std::equal_to<>> cache_;
};

}  // namespace

BpeTokenizer::BpeTokenizer(const std::string& vocab_path, const std::string& merges_path) {
  nlohmann::json vocab;
  try {
    vocab = nlohmann::json::parse(read_text_file(vocab_path, "GPT-2 vocabulary (encoder.json)"));
  } catch (const nlohmann::json::exception& e) {
    throw data_error("GPT-2 vocabulary '" + vocab_path + "' is not valid JSON: " + e.what() +
                     "\n    fix: pass GPT-2's encoder.json (a map from token string to id)");
  }
  if (!vocab.is_object() || vocab.empty())
    throw data_error("GPT-2 vocabulary '" + vocab_path + "' is not a JSON object of token -> id" +
                     "\n    fix: pass GPT-2's encoder.json");
  std::unordered_map<std::string, uint32_t> bytes_to_id;
  id_to_bytes_.resize(vocab.size());
  std::vector<bool> seen(vocab.size(), false);
  int64_t eot = -1;
  std::string bytes;
  for (const auto& [key, value] : vocab.items()) {
    if (!value.is_number_unsigned() || value.get<uint64_t>() >= vocab.size() || seen[value.get<uint64_t>()])
      throw data_error("GPT-2 vocabulary '" + vocab_path + "': token '" + key + "' has id " + value.dump() +
                       "; ids must be distinct and below the vocabulary size " + std::to_string(vocab.size()));
    const auto id = value.get<uint32_t>();
    seen[id] = true;
    if (key == "<|endoftext|>") {
      eot = id;
      id_to_bytes_[id] = key;
      continue;
    }
    if (!vocab_string_to_bytes(key, bytes))
      throw data_error("GPT-2 vocabulary '" + vocab_path + "': token '" + key +
                       "' is not in GPT-2's byte-to-character alphabet\n    fix: pass a byte-level BPE encoder.json");
    id_to_bytes_[id] = bytes;
    bytes_to_id.emplace(bytes, id);
  }
  if (eot < 0)
    throw data_error("GPT-2 vocabulary '" + vocab_path + "' has no \"<|endoftext|>\" token" +
                     "\n    fix: pass GPT-2's encoder.json, which defines it");
  framing_ = frame_documents(false, -1, eot, -1, "GPT-2 vocabulary '" + vocab_path + "'");
  for (int b = 0; b < 256; ++b) {
    auto it = bytes_to_id.find(std::string(1, static_cast<char>(b)));
    if (it == bytes_to_id.end())
      throw data_error("GPT-2 vocabulary '" + vocab_path + "' lacks the single-byte token for byte " +
                       std::to_string(b) + "\n    fix: pass a byte-level BPE encoder.json");
    byte_id_[b] = it->second;
  }

  std::istringstream merges(read_text_file(merges_path, "GPT-2 merges file (vocab.bpe)"));
  std::string line, a, b, ab;
  uint32_t rank = 0;
  for (int64_t line_no = 1; std::getline(merges, line); ++line_no) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t space = line.find(' ');
    auto fail = [&](const std::string& why) {
      return data_error("GPT-2 merges file '" + merges_path + "' line " + std::to_string(line_no) + ": " + why +
                        "\n    fix: pass the vocab.bpe that belongs to '" + vocab_path + "'");
    };
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
      throw fail("expected two tokens separated by one space, got '" + line + "'");
    if (!vocab_string_to_bytes(std::string_view(line).substr(0, space), a) ||
        !vocab_string_to_bytes(std::string_view(line).substr(space + 1), b))
      throw fail("'" + line + "' is not in GPT-2's byte-to-character alphabet");
    ab = a + b;
    auto ia = bytes_to_id.find(a), ib = bytes_to_id.find(b), iab = bytes_to_id.find(ab);
    if (ia == bytes_to_id.end() || ib == bytes_to_id.end() || iab == bytes_to_id.end())
      throw fail("merge '" + line + "' uses or makes a token that is not in the vocabulary");
    merges_.emplace(pair_key(ia->second, ib->second), Merge{rank++, iab->second});
  }
  if (merges_.empty())
    throw data_error("GPT-2 merges file '" + merges_path + "' has no merges\n    fix: check the path");
}

void BpeTokenizer::merge_word(std::string_view word, std::vector<uint32_t>& out) const {
  const size_t n = word.size();
  if (n == 1) return out.push_back(byte_id_[static_cast<unsigned char>(word[0])]);
  // Symbols in a doubly linked list; candidate merges in a heap ordered by
  // (rank, position). Stale candidates are skipped when popped.
  std::vector<uint32_t> id(n);
  std::vector<int32_t> prev(n), next(n);
  for (size_t i = 0; i < n; ++i) {
    id[i] = byte_id_[static_cast<unsigned char>(word[i])];
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  struct Candidate {
    uint32_t rank;
    int32_t pos;
    uint32_t left, right;  // the pair this candidate was made for
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int32_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    auto it = merges_.find(pair_key(id[pos], id[next[pos]]));
    if (it != merges_.end()) heap.push({it->second.rank, pos, id[pos], id[next[pos]]});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int32_t>(i));
  std::vector<bool> dead(n, false);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    if (dead[c.pos] || next[c.pos] < 0 || id[c.pos] != c.left || id[next[c.pos]] != c.right) continue;
    const int32_t r = next[c.pos];
    id[c.pos] = merges_.at(pair_key(c.left, c.right)).result;
    dead[r] = true;
    next[c.pos] = next[r];
    if (next[r] >= 0) prev[next[r]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = next[i]) out.push_back(id[i]);
}

size_t BpeTokenizer::safe_split_point(std::string_view text, size_t target, size_t window) const {
  return gputrain::safe_split_point(text, target, window);
}

std::unique_ptr<TokenEncoder> BpeTokenizer::make_encoder() const { return std::make_unique<BpeEncoder>(*this); }

std::string BpeTokenizer::decode(std::span<const uint32_t> ids) const {
  std::string s;
  for (uint32_t id : ids) {
    if (id >= id_to_bytes_.size())
      throw data_error("token id " + std::to_string(id) + " is not in the GPT-2 vocabulary (" +
                       std::to_string(id_to_bytes_.size()) + " tokens)");
    s += id_to_bytes_[id];
  }
  return s;
}

}  // namespace gputrain
