#include "data/token_windows.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "util/error.h"

namespace gputrain {

TokenWindows::TokenWindows(const DataSourceSettings& d, const ModelSettings& m, const std::string& key)
    : data_(d, m.vocab_size, key),
      format_(d.format),
      packing_(d.packing),
      document_attention_(d.document_attention),
      T_(m.seq_len) {
  const auto& shards = data_.shards();
  require_document_start(d.packing != Packing::kStream || d.mask_document_boundaries || d.document_attention,
                         data_.eot_token().has_value(), key);
  int64_t total = 0;
  if (packing_ == Packing::kStream) {
    for (const auto& s : shards) {
      first_window_.push_back(total);
      total += std::max<int64_t>(0, (s.count - 1) / T_);
    }
    first_window_.push_back(total);
  } else {
    int64_t real = 0;
    for (size_t si = 0; si < shards.size(); ++si) {
      const int64_t n = shards[si].count;
      const std::vector<int64_t> starts = data_.eot_positions(static_cast<int64_t>(si));
      int64_t p = starts.empty() ? 0 : starts.front();  // tokens before the first document start are skipped
      while (p < n - 1) {
        // documents: the last document start that leaves room for its own end-of-document token as the
        // window's final target; padded: the next one, if it does.
        const int64_t reach = std::min(p + T_, n - 1);
        int64_t b = -1;
        if (packing_ == Packing::kPadded) {
          const auto next = std::upper_bound(starts.begin(), starts.end(), p);
          if (next != starts.end() && *next <= reach) b = *next;
        } else if (auto it = std::upper_bound(starts.begin(), starts.end(), reach); it != starts.begin()) {
          b = *std::prev(it);
        }
        Window w{p, static_cast<int32_t>(si), 0};
        if (b > p) {
          w.length = static_cast<int32_t>(b + 1 - p);
          p = b;
        } else {  // one document longer than a window: continue it in the next
          w.length = static_cast<int32_t>(std::min(p + T_ + 1, n) - p);
          p += T_;
        }
        packed_.push_back(w);
        real += w.length;
      }
    }
    total = static_cast<int64_t>(packed_.size());
    if (total > 0) fill_ = static_cast<double>(real) / static_cast<double>(total * (T_ + 1));
  }
  begin_ = static_cast<int64_t>(std::floor(static_cast<double>(total) * d.span[0]));
  end_ = static_cast<int64_t>(std::floor(static_cast<double>(total) * d.span[1]));
  if (end_ <= begin_)
    throw data_error(key + ": " + std::to_string(data_.total_tokens()) + " tokens in " + std::to_string(shards.size()) +
                     " file(s) give " + std::to_string(total) +
                     " windows of model.seq_len + 1 = " + std::to_string(T_ + 1) + " tokens, and the span [" +
                     std::to_string(d.span[0]) + ", " + std::to_string(d.span[1]) + ") keeps none of them" +
                     "\n    fix: use more data, a wider span or a smaller model.seq_len");
}

TokenWindows::Window TokenWindows::window(int64_t g) const {
  if (packing_ != Packing::kStream) return packed_[static_cast<size_t>(g)];
  const auto it = std::upper_bound(first_window_.begin(), first_window_.end(), g);
  const auto si = static_cast<int32_t>(std::distance(first_window_.begin(), it) - 1);
  return Window{(g - first_window_[static_cast<size_t>(si)]) * T_, si, static_cast<int32_t>(T_ + 1)};
}

int64_t TokenWindows::fill_window(uint64_t index, int64_t len, int64_t* out) const {
  const Window w = window(begin_ + static_cast<int64_t>(index));
  const int64_t real = std::min<int64_t>(len, w.length);
  data_.read(w.shard, w.start, real, out);
  return real;
}

void TokenWindows::fill_mask(uint64_t index, int64_t len, uint8_t* out) const {
  const Window w = window(begin_ + static_cast<int64_t>(index));
  data_.read_mask(w.shard, w.start, std::min<int64_t>(len, w.length), out);
}

std::string TokenWindows::describe() const {
  const auto& shards = data_.shards();
  std::string what = format_ == DataFormat::kText ? "byte-level text" : "tokens";
  if (!data_.tokenizer().empty()) what += " (" + data_.tokenizer() + ")";
  std::string files = shards.size() == 1
                          ? "'" + shards.front().path() + "'"
                          : std::to_string(shards.size()) + " files ('" + shards.front().path() + "', ...)";
  std::string s = what + " from " + files + ": " + std::to_string(data_.total_tokens()) + " tokens, " +
                  std::to_string(window_count()) + " windows";
  if (packing_ != Packing::kStream) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.1f%%", 100.0 * fill_);
    s += (packing_ == Packing::kPadded ? " one document each (" : " packed by document (") + std::string(buf) +
         " real tokens)";
  }
  if (data_.has_loss_mask()) s += ", loss on the masked-in (assistant) tokens only";
  if (document_attention_) s += ", each document attending only to itself";
  return s;
}

}  // namespace gputrain
