#include "data/synthetic_language.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

namespace gputrain {

MarkovLanguage::MarkovLanguage(int64_t vocab, int64_t order, int64_t branching, uint64_t seed)
    : vocab_(vocab), order_(order), branching_(std::min(branching, vocab)) {
  contexts_ = 1;
  for (int64_t i = 0; i < order; ++i) contexts_ *= vocab;
  const int64_t b = branching_;
  successor_.resize(contexts_ * b);
  cumulative_.resize(contexts_ * b);
  std::vector<double> prob(contexts_ * b);

  // The transition table: distinct successors, Dirichlet(1) probabilities.
  DataRng rng(mix_seed(seed, 0x6d61726b6f76ull));
  std::unordered_set<int64_t> taken;
  for (int64_t c = 0; c < contexts_; ++c) {
    taken.clear();
    double total = 0;
    for (int64_t j = 0; j < b; ++j) {
      int64_t t;
      do t = static_cast<int64_t>(rng.below(vocab));
      while (!taken.insert(t).second);
      successor_[c * b + j] = static_cast<int32_t>(t);
      prob[c * b + j] = -std::log(1.0 - rng.uniform());
      total += prob[c * b + j];
    }
    double acc = 0;
    for (int64_t j = 0; j < b; ++j) {
      prob[c * b + j] /= total;
      acc += prob[c * b + j];
      cumulative_[c * b + j] = acc;
    }
    cumulative_[c * b + b - 1] = 1.0;
  }

  // Stationary distribution by power iteration on the lazy chain (P + I) / 2,
  // which has the same stationary distributions and always converges.
  std::vector<double> pi(contexts_, 1.0 / static_cast<double>(contexts_)), next(contexts_);
  for (int iter = 0; iter < 200000; ++iter) {
    for (int64_t c = 0; c < contexts_; ++c) next[c] = 0.5 * pi[c];
    for (int64_t c = 0; c < contexts_; ++c) {
      const int64_t shifted = (c * vocab) % contexts_;  // drop the oldest token
      for (int64_t j = 0; j < b; ++j) next[shifted + successor_[c * b + j]] += 0.5 * pi[c] * prob[c * b + j];
    }
    double diff = 0;
    for (int64_t c = 0; c < contexts_; ++c) diff += std::fabs(next[c] - pi[c]);
    pi.swap(next);
    if (diff < 1e-13) break;
  }

  stationary_cdf_.resize(contexts_);
  double acc = 0;
  for (int64_t c = 0; c < contexts_; ++c) {
    double h = 0;
    for (int64_t j = 0; j < b; ++j) {
      double p = prob[c * b + j];
      if (p > 0) h -= p * std::log(p);
    }
    entropy_rate_ += pi[c] * h;
    acc += pi[c];
    stationary_cdf_[c] = acc;
  }
  for (auto& v : stationary_cdf_) v /= acc;

  // H(X_0..X_{k-1}) from the marginal of the context distribution on its first
  // k tokens; H(X_k | X_0..X_{k-1}) is the difference of consecutive ones.
  auto prefix_joint_entropy = [&](int64_t k) {
    int64_t div = 1;
    for (int64_t i = k; i < order; ++i) div *= vocab;
    std::vector<double> m(contexts_ / div, 0.0);
    for (int64_t c = 0; c < contexts_; ++c) m[c / div] += pi[c];
    double h = 0;
    for (double p : m)
      if (p > 0) h -= p * std::log(p);
    return h;
  };
  prefix_entropy_.assign(order, 0.0);
  for (int64_t k = 1; k < order; ++k) prefix_entropy_[k] = prefix_joint_entropy(k + 1) - prefix_joint_entropy(k);
}

void MarkovLanguage::generate(DataRng& rng, int64_t n, int64_t* out) const {
  // Start from a stationary context, then walk the chain.
  int64_t c = std::lower_bound(stationary_cdf_.begin(), stationary_cdf_.end(), rng.uniform()) - stationary_cdf_.begin();
  c = std::min(c, contexts_ - 1);
  for (int64_t i = order_ - 1, rest = c; i >= 0; --i, rest /= vocab_) out[i] = rest % vocab_;
  const int64_t b = branching_;
  for (int64_t t = order_; t < n; ++t) {
    const double* cdf = &cumulative_[c * b];
    int64_t j = std::upper_bound(cdf, cdf + b, rng.uniform()) - cdf;
    j = std::min(j, b - 1);
    out[t] = successor_[c * b + j];
    c = (c * vocab_) % contexts_ + out[t];
  }
}

double MarkovLanguage::entropy_floor(int64_t seq_len) const {
  // Target t (0-based) predicts token t+1 having seen tokens 0..t.
  double total = 0;
  for (int64_t t = 0; t < seq_len; ++t) total += (t + 1 < order_) ? prefix_entropy_[t + 1] : entropy_rate_;
  return total / static_cast<double>(seq_len);
}

}  // namespace gputrain
