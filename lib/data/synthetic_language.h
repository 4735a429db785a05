// A learnable synthetic language with a known entropy floor: an order-n Markov
// chain over `vocab` tokens in which each context (the previous n tokens) has
// `branching` possible successors with random probabilities. Its stationary
// distribution and entropy rate are computed exactly, so a correct trainer's
// loss must approach entropy_floor(seq_len) and can never go below it.
#pragma once
#include <cstdint>
#include <vector>

#include "data/rng.h"

namespace gputrain {

class MarkovLanguage {
 public:
  MarkovLanguage(int64_t vocab, int64_t order, int64_t branching, uint64_t seed);

  // Writes n >= order tokens of a stationary sample path.
  void generate(DataRng& rng, int64_t n, int64_t* out) const;

  // Entropy rate in nats/token: H(X_t | X_{t-order}..X_{t-1}) under stationarity.
  double entropy_rate() const { return entropy_rate_; }
  // Mean cross-entropy floor (nats) over the seq_len targets of one window
  // whose first tokens see less than a full context.
  double entropy_floor(int64_t seq_len) const;

  int64_t vocab() const { return vocab_; }
  int64_t order() const { return order_; }

 private:
  int64_t vocab_, order_, branching_, contexts_;
  std::vector<int32_t> successor_;      // [contexts_ * branching_]
  std::vector<double> cumulative_;      // [contexts_ * branching_], per-context CDF
  std::vector<double> stationary_cdf_;  // [contexts_]
  double entropy_rate_ = 0;
  std::vector<double> prefix_entropy_;  // [k] = H(X_k | X_0..X_{k-1}) for k = 1..order-1
};

}  // namespace gputrain
