// Which window each sample reads.
//  - Deterministic: a pure function of (seed, stream, rank, world, sample).
//  - Shuffled per epoch: epoch e visits the windows in a random order chosen
//    by (seed, stream, e), computed on the fly (no index array in memory).
//  - Sharded by data-parallel rank: in every epoch rank r reads positions
//    r, r + world, r + 2 world, ... of that order, so ranks never share a
//    window, and `world` ranks with batch B read the same windows per step as
//    one rank with batch world x B. The count % world windows left over rotate
//    with each epoch's order.
//  - Resumable in O(1): the state is the number of samples consumed; sample
//    1,000,000,000 costs what sample 0 does.
// Endless (generated) sources get a distinct 64-bit key per (rank, sample).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>

namespace gputrain {

// A bijection of [0, n) picked by `key`: a 4-round Feistel network over the
// smallest even power of two >= n, cycle-walked back into range (on average
// fewer than 4 rounds of the network per call).
class RandomPermutation {
 public:
  RandomPermutation(uint64_t n, uint64_t key);
  uint64_t operator()(uint64_t i) const;

 private:
  uint64_t n_, keys_[4];
  int half_bits_;
  uint64_t half_mask_;
};

// Streams keep the train and eval orders apart.
constexpr uint64_t kTrainStream = 1, kEvalStream = 2;

struct SamplerOptions {
  uint64_t seed = 0;
  uint64_t stream = 0;  // separates the train and eval orders
  int64_t rank = 0;
  int64_t world = 1;
};

// What a checkpoint saves to continue the data order exactly.
struct SamplerState {
  int64_t global_samples = 0;  // samples consumed by all ranks together
  int64_t window_count = 0;    // the dataset's windows (0 = endless); detects a changed dataset
  uint64_t seed = 0;
  uint64_t stream = 0;
};
nlohmann::json sampler_state_to_json(const SamplerState& s);
SamplerState sampler_state_from_json(const nlohmann::json& j);  // throws a data Error if malformed

class WindowSource;
class MixtureWindows;

class WindowSampler {
 public:
  // window_count 0 = endless source. Throws a data Error when there are
  // fewer windows than ranks.
  WindowSampler(int64_t window_count, SamplerOptions o);
  // The sampler for `source`: a mixture's interleaves its sources (data/mixture.h),
  // each source's windows shuffled per pass over it.
  WindowSampler(const WindowSource& source, SamplerOptions o);

  uint64_t window(int64_t sample) const;  // this rank's sample-th sample, counting across epochs
  int64_t epoch(int64_t sample) const;
  int64_t samples_per_epoch() const { return per_rank_; }  // per rank; 0 = endless or a mixture
  int64_t window_count() const { return window_count_; }

  SamplerState state(int64_t next_sample) const;
  // This rank's next sample for a saved state. Throws a data Error if the
  // state is from another dataset or order, or cannot be split over `world`.
  int64_t resume_sample(const SamplerState& s) const;

 private:
  int64_t window_count_;
  SamplerOptions o_;
  int64_t per_rank_ = 0;
  const MixtureWindows* mixture_ = nullptr;
};

}  // namespace gputrain
