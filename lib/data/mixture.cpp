#include "data/mixture.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "util/error.h"

namespace gputrain {

MixtureSchedule::MixtureSchedule(const std::vector<double>& weights) {
  const size_t n = weights.size();
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  // Quotas by largest remainder, each at least 1, summing to kBlock.
  std::vector<double> exact(n);
  quota_.assign(n, 0);
  int64_t used = 0;
  for (size_t k = 0; k < n; ++k) {
    exact[k] = weights[k] / total * static_cast<double>(kBlock);
    quota_[k] = std::max<int64_t>(1, static_cast<int64_t>(std::floor(exact[k])));
    used += quota_[k];
  }
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return exact[a] - std::floor(exact[a]) > exact[b] - std::floor(exact[b]);
  });
  for (size_t i = 0; used < kBlock; i = (i + 1) % n) ++quota_[order[i]], ++used;
  while (used > kBlock)  // the minimum of 1 overshot: take from the largest
    --quota_[static_cast<size_t>(std::max_element(quota_.begin(), quota_.end()) - quota_.begin())], --used;
  // Spread each source evenly: its i-th slot at fraction (i + 0.5) / quota of the block.
  std::vector<std::pair<double, uint8_t>> keys;
  for (size_t k = 0; k < n; ++k)
    for (int64_t i = 0; i < quota_[k]; ++i)
      keys.emplace_back((static_cast<double>(i) + 0.5) / static_cast<double>(quota_[k]), static_cast<uint8_t>(k));
  std::stable_sort(keys.begin(), keys.end());
  before_.assign(n, std::vector<int32_t>(kBlock + 1, 0));
  for (int64_t p = 0; p < kBlock; ++p) {
    slot_.push_back(keys[static_cast<size_t>(p)].second);
    for (size_t k = 0; k < n; ++k) before_[k][p + 1] = before_[k][p] + (slot_.back() == k ? 1 : 0);
  }
}

std::pair<int, int64_t> MixtureSchedule::at(int64_t g) const {
  const int64_t b = g / kBlock, p = g % kBlock;
  const int k = slot_[static_cast<size_t>(p)];
  return {k, b * quota_[static_cast<size_t>(k)] + before_[static_cast<size_t>(k)][p]};
}

int64_t MixtureSchedule::count(int k, int64_t n) const {
  return n / kBlock * quota_[static_cast<size_t>(k)] + before_[static_cast<size_t>(k)][n % kBlock];
}

namespace {

std::vector<double> weights_of(const DataSourceSettings& d) {
  std::vector<double> w;
  for (const auto& s : d.mixture) w.push_back(s.weight);
  return w;
}

}  // namespace

MixtureWindows::MixtureWindows(const DataSourceSettings& d, const ModelSettings& m, const std::string& key)
    : weights_(weights_of(d)), schedule_(weights_) {
  if (d.mixture.size() > 255)
    throw config_error(key + ".mixture has " + std::to_string(d.mixture.size()) + " sources; at most 255");
  for (size_t k = 0; k < d.mixture.size(); ++k) {
    DataSourceSettings part = d;
    part.mixture.clear();
    part.paths = d.mixture[k].paths;
    parts_.push_back(make_window_source(part, m, key + ".mixture[" + std::to_string(k) + "]"));
    labels_.push_back(part.paths.size() == 1
                          ? part.paths.front()
                          : part.paths.front() + " (+" + std::to_string(part.paths.size() - 1) + ")");
    if (parts_.back()->eot_token() != parts_.front()->eot_token())
      throw data_error(key + ".mixture[" + std::to_string(k) + "] was prepared with another end-of-document id than " +
                       key + ".mixture[0]\n    fix: prepare every source with the same tokenizer");
    if (parts_.back()->has_loss_mask() != parts_.front()->has_loss_mask())
      throw data_error(key +
                       ".mixture mixes chat sources (with loss masks) and plain ones\n    fix: prepare the plain "
                       "text as chat too, or train on them in separate runs");
  }
}

void MixtureWindows::fill_mask(uint64_t key, int64_t len, uint8_t* out) const {
  parts_[static_cast<size_t>(key >> 48)]->fill_mask(key & ((uint64_t{1} << 48) - 1), len, out);
}

int64_t MixtureWindows::window_count() const {
  int64_t n = 0;
  for (const auto& p : parts_) n += p->window_count();
  return n;
}

int64_t MixtureWindows::fill_window(uint64_t key, int64_t len, int64_t* out) const {
  return parts_[static_cast<size_t>(key >> 48)]->fill_window(key & ((uint64_t{1} << 48) - 1), len, out);
}

nlohmann::ordered_json mixture_report(const MixtureWindows& m, int64_t samples, int64_t seq_len, bool detail) {
  nlohmann::ordered_json out = detail ? nlohmann::ordered_json::array() : nlohmann::ordered_json::object();
  for (int k = 0; k < m.schedule().sources(); ++k) {
    const int64_t n = m.schedule().count(k, samples);
    if (detail) {
      out.push_back({{"path", m.labels()[static_cast<size_t>(k)]},
                     {"weight", m.weight(k)},
                     {"samples", n},
                     {"tokens", n * seq_len}});
    } else {
      out[m.labels()[static_cast<size_t>(k)]] = n * seq_len;
    }
  }
  return out;
}

std::string MixtureWindows::describe() const {
  const double total = std::accumulate(weights_.begin(), weights_.end(), 0.0);
  std::string s = "mixture of " + std::to_string(parts_.size()) + " sources:";
  for (size_t k = 0; k < parts_.size(); ++k) {
    char share[32];
    std::snprintf(share, sizeof share, "%.1f%%", 100.0 * weights_[k] / total);
    s += std::string(k ? ";" : "") + " " + share + " " + parts_[k]->describe();
  }
  return s;
}

}  // namespace gputrain
