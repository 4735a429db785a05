// Mixtures: the interleaving schedule gives each source its weight's share of
// every block of samples, consistently between at() and count(); the sampler
// reads each source's windows once per pass over that source.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include "data/mixture.h"
#include "data/sampler.h"

using namespace gputrain;

TEST_CASE("mixture schedule: shares follow the weights, and at() and count() agree", "[data][mixture]") {
  const MixtureSchedule s({0.7, 0.2, 0.1});
  const int64_t B = MixtureSchedule::kBlock;
  std::vector<int64_t> seen(3, 0);
  for (int64_t g = 0; g < 3 * B + 123; ++g) {
    const auto [k, j] = s.at(g);
    REQUIRE(j == seen[static_cast<size_t>(k)]);  // the j-th sample of source k
    REQUIRE(s.count(k, g) == j);
    ++seen[static_cast<size_t>(k)];
  }
  for (int k = 0; k < 3; ++k) CHECK(s.count(k, 3 * B + 123) == seen[static_cast<size_t>(k)]);
  // Whole blocks: the largest-remainder quotas of 4096 x weight.
  CHECK(s.count(0, B) == 2867);
  CHECK(s.count(1, B) == 819);
  CHECK(s.count(2, B) == 410);
  // Spread evenly: in any 100 consecutive samples each source is within 2 of its share.
  for (int64_t start = 0; start < 2 * B; start += 37)
    for (int k = 0; k < 3; ++k) {
      const double share = std::vector<double>{0.7, 0.2, 0.1}[static_cast<size_t>(k)];
      CHECK(std::abs(static_cast<double>(s.count(k, start + 100) - s.count(k, start)) - 100 * share) <= 2.0);
    }
  // A tiny weight still gets a sample per block (never silently dropped).
  const MixtureSchedule tiny({1.0, 1e-9});
  CHECK(tiny.count(1, B) == 1);
  CHECK(tiny.count(0, B) == B - 1);
}
