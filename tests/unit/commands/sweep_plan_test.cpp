// `gputrain sweep --random`: the draws of a :log range are uniform in the logarithm, those of an :int
// range uniform over the integers LO..HI, a plain range uniform; the same seed gives the same trials.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "commands/sweep.h"

using namespace gputrain;

TEST_CASE("sweep: random draws follow their ranges' distributions", "[sweep]") {
  SweepOptions o;
  o.random = 7000;
  o.seed = 11;
  o.ranges = {"optim.lr=1e-5:1e-1:log", "train.per_device_batch_size=2:8:int", "optim.weight_decay=0:1"};
  const auto trials = plan_sweep(o);
  REQUIRE(trials.size() == 7000);
  std::map<int, int> decades, batches, tenths;
  for (const auto& t : trials) {
    REQUIRE(t.values.size() == 3);
    const double lr = std::stod(t.values[0].second);
    REQUIRE((lr >= 1e-5 && lr <= 1e-1));
    ++decades[std::min(-2, static_cast<int>(std::floor(std::log10(lr))))];  // 0.1 itself: the last decade
    ++batches[std::stoi(t.values[1].second)];
    ++tenths[static_cast<int>(std::stod(t.values[2].second) * 10)];
  }
  // Expected counts, each within 4 standard deviations of a binomial count (a fixed seed: no flakes).
  auto near = [](int count, double p) {
    const double mean = 7000 * p, sd = std::sqrt(7000 * p * (1 - p));
    INFO("count " << count << ", expected " << mean);
    CHECK(std::abs(count - mean) < 4 * sd);
  };
  // log: each of the 4 decades holds a quarter (a uniform draw would put 90% in the last one).
  REQUIRE(decades.size() == 4);
  for (int d = -5; d < -1; ++d) near(decades[d], 0.25);
  // int: 2..8, both ends included, each a seventh.
  REQUIRE(batches.size() == 7);
  for (int b = 2; b <= 8; ++b) near(batches[b], 1.0 / 7);
  // plain: each tenth of [0, 1) a tenth.
  for (int k = 0; k < 10; ++k) near(tenths[k], 0.1);
  // The same seed, the same draws; another seed, others.
  CHECK(plan_sweep(o)[123].values == trials[123].values);
  o.seed = 12;
  CHECK(plan_sweep(o)[123].values != trials[123].values);
}
