#include "run_comparison.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "test_util.h"

namespace gputrain::test {

std::string dp_recipe() {
  return "run: {name: dp, threads: 1}\n"
         "model: {vocab_size: 256, seq_len: 32, n_layer: 2, n_head: 2, d_model: 32, dropout: 0.0}\n"
         "data:\n"
         "  train: {format: text, path: " +
         shared_data("tinyshakespeare.txt") +
         ", span: [0.0, 0.01]}\n"
         "train: {per_device_batch_size: 4, max_steps: 20, log_every: 1}\n"
         "optim: {lr: 3e-3, schedule: {warmup_steps: 2, decay_steps: 20}}\n"
         "metrics: {progress: off}\n";
}

std::vector<double> column(const std::string& out, const char* key) {
  std::vector<double> v;
  for (const auto& r : read_jsonl(out + "/metrics.jsonl"))
    v.push_back(r[key].is_null() ? std::nan("") : r[key].get<double>());
  return v;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b, size_t steps) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && (steps == 0 || i < steps); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) {  // a skipped step's gradient norm: skipped on both sides
      if (std::isnan(a[i]) != std::isnan(b[i])) return INFINITY;
      continue;
    }
    m = std::max(m, std::abs(a[i] - b[i]));
  }
  return m;
}

}  // namespace gputrain::test
