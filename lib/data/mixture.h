// A mixture of training sources (data.*.mixture): token sources sampled in
// proportion to their weights, in a deterministic interleaving that is a
// pure function of the global sample index, so a run resumes exactly (the
// saved state stays the number of samples consumed) and any number of ranks
// reads what one rank would.
//  - The interleaving repeats in blocks of kBlock samples; each block holds
//    each source's quota (largest remainder of weight x kBlock, at least 1),
//    spread evenly through the block.
//  - Within a source, its j-th sample reads its windows in a shuffled order
//    per pass over that source (the sampler draws it: sampler.h).
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "data/window_source.h"

namespace gputrain {

class MixtureSchedule {
 public:
  static constexpr int64_t kBlock = 4096;
  explicit MixtureSchedule(const std::vector<double>& weights);
  // The source of global sample g and how many samples of that source come before it.
  std::pair<int, int64_t> at(int64_t g) const;
  // Samples of source k among the first n.
  int64_t count(int k, int64_t n) const;
  int sources() const { return static_cast<int>(quota_.size()); }

 private:
  std::vector<int64_t> quota_;
  std::vector<uint8_t> slot_;                 // source of each position in a block
  std::vector<std::vector<int32_t>> before_;  // before_[k][p]: samples of k at positions < p
};

class MixtureWindows : public WindowSource {
 public:
  // Opens each source of `d.mixture` (a data Error names the source) with
  // the rest of `d`'s settings.
  MixtureWindows(const DataSourceSettings& d, const ModelSettings& m, const std::string& key);

  // A window key names the source in its top bits.
  static uint64_t window_key(int source, uint64_t window) { return (static_cast<uint64_t>(source) << 48) | window; }

  int64_t window_count() const override;  // all sources' together (a changed dataset is caught on resume)
  int64_t fill_window(uint64_t key, int64_t len, int64_t* out) const override;
  std::optional<int64_t> eot_token() const override { return parts_.front()->eot_token(); }
  bool has_loss_mask() const override { return parts_.front()->has_loss_mask(); }
  void fill_mask(uint64_t key, int64_t len, uint8_t* out) const override;
  std::string describe() const override;
  const MixtureWindows* mixture() const override { return this; }

  const MixtureSchedule& schedule() const { return schedule_; }
  int64_t part_window_count(int k) const { return parts_[static_cast<size_t>(k)]->window_count(); }
  // What summary.json and metrics.jsonl call each source: its path (pattern), or its list.
  const std::vector<std::string>& labels() const { return labels_; }
  double weight(int k) const { return weights_[static_cast<size_t>(k)]; }

 private:
  std::vector<std::unique_ptr<WindowSource>> parts_;
  std::vector<std::string> labels_;
  std::vector<double> weights_;
  MixtureSchedule schedule_;
};

// After `samples` global samples of `seq_len` tokens: {label: tokens read} (metrics.jsonl's
// tokens_by_source), or with `detail` [{path, weight, samples, tokens}] (summary.json's data_sources).
nlohmann::ordered_json mixture_report(const MixtureWindows& m, int64_t samples, int64_t seq_len, bool detail);

}  // namespace gputrain
