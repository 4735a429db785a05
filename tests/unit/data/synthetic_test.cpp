// The synthetic language's entropy is what it claims.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>

#include "data/rng.h"
#include "data/synthetic_language.h"

using namespace gputrain;

namespace {

// Plug-in estimate of H(X_t | previous `order` tokens) from one long sample.
double empirical_conditional_entropy(const std::vector<int64_t>& x, int64_t order) {
  std::map<std::vector<int64_t>, std::map<int64_t, double>> counts;
  for (size_t t = order; t < x.size(); ++t)
    counts[std::vector<int64_t>(x.begin() + t - order, x.begin() + t)][x[t]] += 1;
  double h = 0, n = static_cast<double>(x.size() - order);
  for (const auto& [ctx, next] : counts) {
    double c = 0;
    for (const auto& [_, k] : next) c += k;
    for (const auto& [_, k] : next) h -= (k / n) * std::log(k / c);
  }
  return h;
}

}  // namespace

TEST_CASE("the Markov language's entropy rate matches a long sample", "[data]") {
  for (int64_t order : {1, 2}) {
    MarkovLanguage lang(8, order, 3, 11);
    DataRng rng(5);
    std::vector<int64_t> x(400000);
    lang.generate(rng, static_cast<int64_t>(x.size()), x.data());
    INFO("order " << order);
    CHECK(lang.entropy_rate() > 0.1);
    CHECK(lang.entropy_rate() < std::log(3.0) + 1e-9);  // at most log(branching)
    CHECK(empirical_conditional_entropy(x, order) == Approx(lang.entropy_rate()).margin(0.01));
  }
}

TEST_CASE("the entropy floor accounts for the first tokens' shorter context", "[data]") {
  MarkovLanguage lang(8, 2, 3, 11);
  // Target 0 sees one token: H(X1 | X0) >= H(X2 | X0, X1).
  CHECK(lang.entropy_floor(1) >= lang.entropy_rate());
  CHECK(lang.entropy_floor(64) == Approx((lang.entropy_floor(1) + 63 * lang.entropy_rate()) / 64));
  // H(X1 | X0) measured on windows' first two tokens.
  std::map<int64_t, std::map<int64_t, double>> counts;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    DataRng rng(mix_seed(9, i));
    int64_t w[2];
    lang.generate(rng, 2, w);
    counts[w[0]][w[1]] += 1;
  }
  double h = 0;
  for (const auto& [_, next] : counts) {
    double c = 0;
    for (const auto& [__, k] : next) c += k;
    for (const auto& [__, k] : next) h -= (k / n) * std::log(k / c);
  }
  CHECK(h == Approx(lang.entropy_floor(1)).margin(0.01));
}
