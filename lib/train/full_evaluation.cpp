#include "train/full_evaluation.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "parallel/process_groups.h"
#include "parallel/replica_sums.h"
#include "train/forward_backward.h"
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
                            const std::function<double(const Batch&)>& loss_sum,
                            const std::function<int64_t(const Batch&)>& units) {
  EvalTotals totals;
  totals.bytes = tokenizer ? 0 : -1;
  const int64_t n = source.window_count();
  std::vector<uint64_t> keys;
  auto flush = [&] {
    if (keys.empty()) return;
    Batch b = window_batch(source, keys, seq_len, documents);
    if (tokenizer) totals.bytes += target_bytes(b, *tokenizer);
    b = batch_on(std::move(b), device);
    totals.loss_sum += b.target_count > 0 ? loss_sum(b) : 0.0;
    totals.targets += b.target_count;
    totals.units += b.target_count > 0 ? units(b) : 0;
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

double evaluate_every_window(ForwardBackward& passes, const ProcessGroups& groups, const WindowSource& source,
                             const Settings& s, int64_t dp, torch::Device device, bool pipelined, bool fully_sharded,
                             int64_t* units) {
  const WindowShare share = pipelined ? WindowShare{} : WindowShare{groups.coord().dp, dp};
  const int64_t batch = s.train.per_device_batch_size, T = s.model.seq_len;
  int64_t forwards = 0;
  const EvalTotals t = evaluate_windows(
      source, T, batch, document_options(s.data.eval), device, share, nullptr,
      [&](const Batch& b) {
        ++forwards;
        return passes.loss_sum(b);
      },
      passes.objective().units);
  if (pipelined) return t.loss();
  if (fully_sharded) {
    // A rank whose share took fewer forwards (fewer windows, or batches without targets) runs forwards
    // on a batch without targets until it has run as many as the largest share's batches.
    const int64_t most = (source.window_count() + dp - 1) / dp;
    const Batch empty{torch::zeros({1, T}, torch::kLong).to(device),
                      torch::full({1, T}, kIgnoreIndex, torch::kLong).to(device), 0};
    for (; forwards < (most + batch - 1) / batch; ++forwards) passes.evaluate({empty});
  }
  const torch::Tensor loss_sum = torch::tensor(t.loss_sum, torch::kDouble).to(device);
  const double total = sum_loss_and_any(groups, loss_sum, false).first.item<double>();
  const int64_t all_units = global_targets(groups, t.units);
  if (units) *units = all_units;
  return total / static_cast<double>(std::max<int64_t>(all_units, 1));
}

}  // namespace gputrain
