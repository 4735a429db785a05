#include "data/loader.h"

#include <ATen/ATen.h>

#include "data/preference_pairs.h"
#include "util/error.h"
#include "util/ignore_index.h"

namespace gputrain {

LoaderOptions loader_options(const Settings& s, const DataSourceSettings& d, torch::Device device,
                             int64_t num_workers) {
  LoaderOptions o;
  o.batch_size = s.train.per_device_batch_size;
  o.seq_len = s.model.seq_len;
  o.num_workers = num_workers;
  o.prefetch = s.data.prefetch;
  o.pin_memory = s.data.pin_memory;
  o.device = device;
  o.documents = document_options(d);
  return o;
}

DocumentOptions document_options(const DataSourceSettings& d) {
  return {d.mask_document_boundaries, d.document_attention};
}

BatchLoader::BatchLoader(const WindowSource& source, const WindowSampler& sampler, LoaderOptions opts,
                         int64_t first_sample)
    : source_(source), sampler_(sampler), opts_(opts), first_sample_(first_sample) {
  require_document_start(opts_.documents.mask_boundaries || opts_.documents.attention, source.eot_token().has_value(),
                         "data.*");
  for (int64_t i = 0; i < opts_.num_workers; ++i) workers_.emplace_back([this] { worker_loop(); });
}

BatchLoader::~BatchLoader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

Batch BatchLoader::make_host_batch(int64_t index) const {
  auto options = torch::TensorOptions().dtype(torch::kLong);
  if (opts_.pin_memory && opts_.device.is_cuda()) options = options.pinned_memory(true);
  std::vector<uint64_t> keys(static_cast<size_t>(opts_.batch_size));
  for (int64_t r = 0; r < opts_.batch_size; ++r)
    keys[static_cast<size_t>(r)] =
        sampler_.window(first_sample_ + (index * opts_.shards + opts_.shard) * opts_.batch_size + r);
  return window_batch(source_, keys, opts_.seq_len, opts_.documents, options);
}

// Each token's place in its document: 0 at the row's start, at every document-start id `start` and
// where the padding begins (t == real; one more document, taking no loss), counting up between.
static void number_document_positions(const int64_t* x, int64_t T, int64_t real, int64_t start, int64_t* out) {
  int64_t position = 0;
  for (int64_t t = 0; t < T; ++t) {
    if (t > 0 && (t == real || (t < real && x[t] == start))) position = 0;
    out[t] = position++;
  }
}

Batch window_batch(const WindowSource& source, std::span<const uint64_t> keys, int64_t T, DocumentOptions documents,
                   torch::TensorOptions options) {
  if (const PreferencePairs* pairs = source.preference()) return preference_batch(*pairs, keys, T, options);
  const auto B = static_cast<int64_t>(keys.size());
  Batch b;
  b.input = torch::empty({B, T}, options);
  b.target = torch::empty({B, T}, options);
  std::vector<int64_t> window(T + 1);
  const bool masked = source.has_loss_mask();
  std::vector<uint8_t> mask(masked ? T + 1 : 0);
  int64_t* in = b.input.data_ptr<int64_t>();
  int64_t* tg = b.target.data_ptr<int64_t>();
  torch::Tensor positions = documents.attention ? torch::empty({B, T}, options) : torch::Tensor();
  const int64_t eot = source.eot_token().value_or(-1);
  const int64_t pad_token = source.eot_token().value_or(0);  // inputs of padding positions
  int64_t counted = 0;
  for (int64_t r = 0; r < B; ++r) {
    const uint64_t key = keys[static_cast<size_t>(r)];
    const int64_t real = source.fill_window(key, T + 1, window.data());
    if (masked) source.fill_mask(key, real, mask.data());
    int64_t* x = in + r * T;
    int64_t* y = tg + r * T;
    for (int64_t t = 0; t < T; ++t) {
      const bool is_real = t + 1 < real;  // both the input and its target are data, not padding
      x[t] = t < real ? window[t] : pad_token;
      y[t] = is_real ? window[t + 1] : kIgnoreIndex;
      // A prediction made from an end-of-document input with an earlier
      // document in view crosses a boundary (Megatron's eod_mask_loss).
      if (is_real && documents.mask_boundaries && t > 0 && x[t] == eot) y[t] = kIgnoreIndex;
      if (is_real && masked && mask[t + 1] == 0) y[t] = kIgnoreIndex;  // chat: a prompt token takes no loss
      counted += y[t] != kIgnoreIndex;
    }
    if (positions.defined()) number_document_positions(x, T, real, eot, positions.data_ptr<int64_t>() + r * T);
  }
  b.target_count = counted;
  if (positions.defined()) b.token_layout = document_layout(positions);
  return b;
}

Batch batch_on(Batch b, torch::Device device) {
  if (device.is_cpu()) return b;
  const bool async = b.input.is_pinned();
  b.input = b.input.to(device, /*non_blocking=*/async);
  b.target = b.target.to(device, /*non_blocking=*/async);
  b.token_layout = b.token_layout.to(device);
  for (torch::Tensor* t : {&b.lengths, &b.target_rows, &b.target_offsets})
    if (t->defined()) *t = t->to(device);
  return b;
}

void BatchLoader::worker_loop() {
  while (true) {
    int64_t index;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Bounded prefetch: never run more than `prefetch` batches ahead of the consumer.
      cv_.wait(lock, [&] { return stop_ || error_ || next_claim_ < next_index_ + opts_.prefetch; });
      if (stop_ || error_) return;
      index = next_claim_++;
    }
    try {
      Batch b = make_host_batch(index);
      std::lock_guard<std::mutex> lock(mu_);
      ready_.emplace(index, std::move(b));
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
    }
    cv_.notify_all();
  }
}

Batch BatchLoader::next() {
  if (workers_.empty()) return batch_on(make_host_batch(next_index_++), opts_.device);
  Batch b;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return error_ || ready_.count(next_index_) > 0; });
    auto it = ready_.find(next_index_);
    if (it == ready_.end()) std::rethrow_exception(error_);
    b = std::move(it->second);
    ready_.erase(it);
    ++next_index_;
  }
  cv_.notify_all();  // a slot opened
  return batch_on(std::move(b), opts_.device);
}

}  // namespace gputrain
