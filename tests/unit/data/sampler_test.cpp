// The sampler: a permutation per epoch, disjoint and complete across
// data-parallel ranks, and resumable from a few numbers in O(1).
#include <catch2/catch.hpp>

#include <set>

#include "data/sampler.h"
#include "util/error.h"

using namespace gputrain;

TEST_CASE("RandomPermutation is a bijection of 0..n-1 for awkward n", "[data][sampler]") {
  for (uint64_t n : {1ull, 2ull, 3ull, 5ull, 64ull, 1000ull, 4097ull}) {
    RandomPermutation p(n, 99);
    std::vector<bool> seen(n, false);
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t v = p(i);
      REQUIRE(v < n);
      CHECK_FALSE(seen[v]);
      seen[v] = true;
    }
  }
  // Different keys give different orders.
  RandomPermutation a(1000, 1), b(1000, 2);
  int same = 0;
  for (uint64_t i = 0; i < 1000; ++i) same += a(i) == b(i);
  CHECK(same < 20);
}

TEST_CASE("two ranks never share a window in an epoch and together cover the epoch", "[data][sampler]") {
  const int64_t windows = 1001;  // odd: one window per epoch is left over
  WindowSampler r0(windows, {7, 1, 0, 2}), r1(windows, {7, 1, 1, 2});
  REQUIRE(r0.samples_per_epoch() == 500);
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::set<uint64_t> a, b;
    for (int64_t i = 0; i < 500; ++i) {
      a.insert(r0.window(epoch * 500 + i));
      b.insert(r1.window(epoch * 500 + i));
    }
    CHECK(a.size() == 500);
    CHECK(b.size() == 500);
    std::set<uint64_t> both = a;
    both.insert(b.begin(), b.end());
    CHECK(both.size() == 1000);  // disjoint, and all but the one left-over window
  }
  // Each epoch has its own order.
  CHECK(r0.window(0) != r0.window(500));
  CHECK(r0.epoch(499) == 0);
  CHECK(r0.epoch(500) == 1);
}

TEST_CASE("2 ranks with batch B read the windows 1 rank with batch 2B reads", "[data][sampler]") {
  const int64_t B = 4;
  // The windows of one step in both layouts (`count` windows in the dataset).
  auto step_windows = [&](int64_t count, int64_t step) {
    WindowSampler one(count, {5, 1, 0, 1}), r0(count, {5, 1, 0, 2}), r1(count, {5, 1, 1, 2});
    std::multiset<uint64_t> single, pair;
    for (int64_t j = 0; j < 2 * B; ++j) single.insert(one.window(step * 2 * B + j));
    for (int64_t j = 0; j < B; ++j) pair.insert(r0.window(step * B + j)), pair.insert(r1.window(step * B + j));
    return std::make_pair(single, pair);
  };
  // An even count: the same at every step, across epoch boundaries (100 steps of 8 read 2.4 epochs
  // of 334), including steps that a boundary cuts in two (step 41 reads samples 328..335).
  REQUIRE(WindowSampler(334, {5, 1, 0, 1}).epoch(100 * 2 * B - 1) == 2);
  for (int64_t step = 0; step < 100; ++step) {
    INFO("step " << step);
    const auto [single, pair] = step_windows(334, step);
    CHECK(single == pair);
  }
  // An odd count leaves one window over per epoch for 2 ranks (not for 1): the same in the first epoch.
  for (int64_t step = 0; (step + 1) * 2 * B <= 332; ++step) {
    INFO("step " << step);
    const auto [single, pair] = step_windows(333, step);
    CHECK(single == pair);
  }
}

TEST_CASE("a restored state continues with exactly the next windows, at once", "[data][sampler]") {
  WindowSampler s(12345, {3, 1, 1, 4});
  const int64_t k = 7777;
  const SamplerState saved = sampler_state_from_json(sampler_state_to_json(s.state(k)));
  CHECK(saved.global_samples == k * 4);
  WindowSampler fresh(12345, {3, 1, 1, 4});
  const int64_t resume = fresh.resume_sample(saved);
  CHECK(resume == k);
  for (int64_t i = 0; i < 100; ++i) CHECK(fresh.window(resume + i) == s.window(k + i));
  // Far into training is as cheap as the start: no replay.
  const int64_t far = 1'000'000'000'000;
  CHECK(fresh.window(far) == s.window(far));
  CHECK(fresh.window(far) < 12345);
  // Endless (generated) sources: keys differ by rank and sample, and resume the same way.
  WindowSampler e0(0, {3, 1, 0, 2}), e1(0, {3, 1, 1, 2});
  CHECK(e0.window(10) != e1.window(10));
  CHECK(e0.window(10) == WindowSampler(0, {3, 1, 0, 2}).window(10));
}

TEST_CASE("a state from another dataset, order or layout is refused", "[data][sampler]") {
  WindowSampler s(1000, {3, 1, 0, 2});
  SamplerState st = s.state(10);
  WindowSampler other_data(999, {3, 1, 0, 2});
  CHECK_THROWS_WITH(other_data.resume_sample(st), Catch::Contains("dataset of 1000 windows, but this one has 999"));
  WindowSampler other_seed(1000, {4, 1, 0, 2});
  CHECK_THROWS_WITH(other_seed.resume_sample(st), Catch::Contains("another data order"));
  WindowSampler three_ranks(1000, {3, 1, 0, 3});
  CHECK_THROWS_WITH(three_ranks.resume_sample(st), Catch::Contains("cannot be split evenly over 3 ranks"));
  WindowSampler four_ranks(1000, {3, 1, 0, 4});
  CHECK(four_ranks.resume_sample(st) == 5);  // 20 samples in all, 5 per rank
  CHECK_THROWS_AS(sampler_state_from_json(nlohmann::json{{"global_samples", 1}}), Error);
  CHECK_THROWS_WITH(WindowSampler(3, {3, 1, 0, 4}), Catch::Contains("fewer than the 4 data-parallel ranks"));
}
