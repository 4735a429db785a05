#include "train/full_evaluation.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "util/ignore_index.h"

namespace gputrain {
namespace {

// The UTF-8 bytes the batch's targets decode to, row by row, without the tokenizer's special ids.
int64_t target_bytes(const Batch& b, const Tokenizer& tokenizer) {
  const DocumentFraming& f = tokenizer.framing();
  std::set<int64_t> special(f.before.begin(), f.before.end());
  special.insert(f.after.begin(), f.after.end());
  for (int64_t id : {f.bos, f.eos, f.pad})
    if (id >= 0) special.insert(id);
  const torch::Tensor targets = b.target.to(torch::kCPU).contiguous();
  const int64_t* t = targets.data_ptr<int64_t>();
  int64_t bytes = 0;
  std::vector<uint32_t> row;
  for (int64_t r = 0; r < targets.size(0); ++r) {
    row.clear();
    for (int64_t c = 0; c < targets.size(1); ++c) {
      const int64_t id = t[r * targets.size(1) + c];
      if (id != kIgnoreIndex && !special.count(id)) row.push_back(static_cast<uint32_t>(id));
    }
    bytes += static_cast<int64_t>(tokenizer.decode(row).size());
  }
  return bytes;
}

}  // namespace

double EvalTotals::perplexity() const { return std::exp(loss()); }

std::optional<double> EvalTotals::bits_per_byte() const {
  if (bytes <= 0) return std::nullopt;
  return loss_sum / std::log(2.0) / static_cast<double>(bytes);
}

EvalTotals evaluate_windows(const WindowSource& source, int64_t seq_len, int64_t batch_size, DocumentOptions documents,
                            torch::Device device, WindowShare share, const Tokenizer* tokenizer,
                            const std::function<double(const Batch&)>& loss_sum) {
  EvalTotals totals;
  totals.bytes = tokenizer ? 0 : -1;
  const int64_t n = source.window_count();
  std::vector<uint64_t> keys;
  auto flush = [&] {
    if (keys.empty()) return;
    Batch b = window_batch(source, keys, seq_len, documents);
    if (tokenizer) totals.bytes += target_bytes(b, *tokenizer);
    b.input = b.input.to(device);
    b.target = b.target.to(device);
    b.documents = b.documents.to(device);
    totals.loss_sum += b.target_count > 0 ? loss_sum(b) : 0.0;
    totals.targets += b.target_count;
    totals.windows += static_cast<int64_t>(keys.size());
    keys.clear();
  };
  for (int64_t w = share.index; w < n; w += share.count) {
    keys.push_back(static_cast<uint64_t>(w));
    if (static_cast<int64_t>(keys.size()) == batch_size) flush();
  }
  flush();
  return totals;
}

}  // namespace gputrain
