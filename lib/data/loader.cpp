#include "data/loader.h"

#include <ATen/ATen.h>

#include "data/rng.h"

namespace gputrain {

BatchLoader::BatchLoader(const WindowSource& source, LoaderOptions opts, int64_t first_index)
    : source_(source), opts_(opts), next_index_(first_index), next_claim_(first_index) {
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
  const int64_t B = opts_.batch_size, T = opts_.seq_len;
  auto options = torch::TensorOptions().dtype(torch::kLong);
  if (opts_.pin_memory && opts_.device.is_cuda()) options = options.pinned_memory(true);
  Batch b;
  b.input = torch::empty({B, T}, options);
  b.target = torch::empty({B, T}, options);
  std::vector<int64_t> window(T + 1);
  int64_t* in = b.input.data_ptr<int64_t>();
  int64_t* tg = b.target.data_ptr<int64_t>();
  for (int64_t r = 0; r < B; ++r) {
    source_.fill_window(mix_seed(opts_.seed, opts_.stream, static_cast<uint64_t>(index * B + r)), T + 1, window.data());
    std::copy(window.begin(), window.end() - 1, in + r * T);
    std::copy(window.begin() + 1, window.end(), tg + r * T);
  }
  b.target_count = B * T;  // every target counts (document masking comes with packed documents)
  return b;
}

Batch BatchLoader::to_device(Batch b) const {
  if (opts_.device.is_cpu()) return b;
  const bool async = b.input.is_pinned();
  b.input = b.input.to(opts_.device, /*non_blocking=*/async);
  b.target = b.target.to(opts_.device, /*non_blocking=*/async);
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
  if (workers_.empty()) return to_device(make_host_batch(next_index_++));
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
  return to_device(std::move(b));
}

}  // namespace gputrain
