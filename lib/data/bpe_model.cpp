#include "data/bpe_model.h"

#include <cstdio>
#include <queue>

#include "data/unicode_properties.h"
#include "util/error.h"

namespace gputrain {

BpeModel::BpeModel(const nlohmann::json& j, const JsonPlace& place) {
  const auto& vocab = j.find("vocab");
  if (vocab == j.end() || !vocab->is_object()) bad_field(place, "vocab", "is missing or not an object of token -> id");
  int64_t limit = 0;
  for (const auto& [token, id] : vocab->items()) {
    if (!id.is_number_unsigned() || id.get<uint64_t>() >= (uint64_t{1} << 31))
      bad_field(place, "vocab", "gives token '" + token + "' the id " + id.dump() + ", not a non-negative integer");
    limit = std::max<int64_t>(limit, id.get<int64_t>() + 1);
  }
  tokens_.resize(static_cast<size_t>(limit));
  has_token_.assign(static_cast<size_t>(limit), false);
  vocab_.reserve(vocab->size());
  for (const auto& [token, id] : vocab->items()) {
    const auto i = id.get<uint32_t>();
    tokens_[i] = token;
    has_token_[i] = true;
    vocab_.emplace(token, i);
  }
  const double dropout = j.contains("dropout") && j["dropout"].is_number() ? j["dropout"].get<double>() : 0.0;
  if (dropout > 0)
    bad_field(place, "dropout",
              "is " + std::to_string(dropout) + "; data preparation must be deterministic (set it to null)");
  const std::string unk = string_field(j, "unk_token", place, "");
  if (!unk.empty()) {
    unk_ = id_of(unk);
    if (!unk_) bad_field(place, "unk_token", "\"" + unk + "\" is not in the vocabulary");
  }
  fuse_unk_ = bool_field(j, "fuse_unk", place, false);
  byte_fallback_ = bool_field(j, "byte_fallback", place, false);
  ignore_merges_ = bool_field(j, "ignore_merges", place, false);
  prefix_ = string_field(j, "continuing_subword_prefix", place, "");
  suffix_ = string_field(j, "end_of_word_suffix", place, "");
  all_byte_ids_ = true;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    const auto id = id_of(name);
    byte_ids_[b] = id ? static_cast<int64_t>(*id) : -1;
    all_byte_ids_ = all_byte_ids_ && id.has_value();
  }

  const auto& merges = array_field(j, "merges", place);
  merges_.reserve(merges.size());
  std::string a, b;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& m = merges[rank];
    auto fail = [&](const std::string& why) {
      bad_field(place, "merges[" + std::to_string(rank) + "]", "(" + m.dump() + ") " + why);
    };
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        fail("is not two tokens separated by one space");
      a = s.substr(0, space), b = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>(), b = m[1].get<std::string>();
    } else {
      fail("is neither \"a b\" nor [\"a\", \"b\"]");
    }
    const std::string joined =
        a + b.substr(std::min(b.size(), b.compare(0, prefix_.size(), prefix_) == 0 ? prefix_.size() : 0));
    const auto ia = id_of(a), ib = id_of(b), iab = id_of(joined);
    if (!ia || !ib || !iab) fail("uses or makes a token that is not in the vocabulary");
    merges_.emplace(pair_key(*ia, *ib), Merge{static_cast<uint32_t>(rank), *iab});
  }
}

std::optional<uint32_t> BpeModel::id_of(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::token_of(uint32_t id) const {
  return id < tokens_.size() && has_token_[id] ? &tokens_[id] : nullptr;
}

const BpeModel::Merge* BpeModel::merge_of(uint32_t a, uint32_t b) const {
  auto it = merges_.find(pair_key(a, b));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::encode_word(std::string_view w, std::vector<uint32_t>& out) const {
  if (w.empty()) return;
  if (ignore_merges_)
    if (auto id = id_of(w)) return out.push_back(*id);
  // The initial symbols: one per character (or per byte, by byte fallback),
  // unknown characters as the unk token, fused when fuse_unk is set.
  std::vector<uint32_t> sym;
  sym.reserve(w.size());
  std::optional<uint32_t> pending_unk;
  std::string s;
  for (size_t i = 0, len = 0; i < w.size(); i += len) {
    next_code_point(w, i, len);
    const bool first = i == 0, last = i + len == w.size();
    std::string_view piece = w.substr(i, len);
    if ((!first && !prefix_.empty()) || (last && !suffix_.empty())) {
      s.assign(first ? "" : prefix_).append(piece).append(last ? suffix_ : "");
      piece = s;
    }
    if (auto id = id_of(piece)) {
      if (pending_unk) sym.push_back(*pending_unk), pending_unk.reset();
      sym.push_back(*id);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char c : piece) all = all && byte_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {  // (as tokenizers does, a pending unk is not flushed first)
        for (char c : piece) sym.push_back(static_cast<uint32_t>(byte_ids_[static_cast<unsigned char>(c)]));
        continue;
      }
    }
    if (unk_) {
      if (pending_unk && !fuse_unk_) sym.push_back(*pending_unk);
      pending_unk = *unk_;
    }
  }
  if (pending_unk) sym.push_back(*pending_unk);

  const size_t n = sym.size();
  if (n < 2) {
    out.insert(out.end(), sym.begin(), sym.end());
    return;
  }
  std::vector<int32_t> prev(n), next(n);
  std::vector<bool> gone(n, false);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  struct Candidate {
    uint32_t rank;
    int32_t pos;
    uint32_t result;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int32_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    if (const Merge* m = merge_of(sym[pos], sym[next[pos]])) heap.push({m->rank, pos, m->result});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int32_t>(i));
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    if (gone[c.pos] || next[c.pos] < 0) continue;
    const int32_t r = next[c.pos];
    const Merge* m = merge_of(sym[c.pos], sym[r]);
    if (!m || m->result != c.result) continue;  // a stale candidate
    sym[c.pos] = c.result;
    gone[r] = true;
    next[c.pos] = next[r];
    if (next[r] >= 0) prev[next[r]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = next[i]) out.push_back(sym[i]);
}

}  // namespace gputrain
