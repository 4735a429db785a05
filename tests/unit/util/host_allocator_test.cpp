// The host block cache (util/host_allocator.h), as LibTorch's CPU allocator: a freed block serves the
// next request it fits without faulting its pages in again (minor faults counted by the kernel), a
// block no step reused goes back to the OS (resident memory read from /proc), and with
// run.cpu_malloc_cache off every block goes back when freed.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <sys/resource.h>

#include "test_util.h"
#include "util/host_allocator.h"

using namespace gputrain;
using namespace gputrain::test;

namespace {

constexpr int64_t kFloats = 16 * 1024 * 1024;  // 64 MiB
constexpr double kMiB = 64.0;

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// Minor page faults taken to make a 64 MiB tensor and write all of it.
long faults_to_fill(std::vector<at::Tensor>* keep = nullptr) {
  const long before = minor_faults();
  at::Tensor t = at::empty({kFloats});
  t.fill_(1.0f);
  const long faults = minor_faults() - before;
  if (keep) keep->push_back(t);
  return faults;
}

double rss_mb() { return proc_status_mb("self", "VmRSS"); }

// Each case starts from an empty cache in the mode it names.
void start_clean(bool keep_freed) {
  install_host_block_cache(keep_freed);
  release_host_block_cache();
  end_host_cache_step();
  reset_host_cache_peak();
}

}  // namespace

TEST_CASE("util: the host block cache reuses a freed block without faulting its pages in again", "[util]") {
  start_clean(true);
  const long first = faults_to_fill();  // mapped, faulted in, freed into the cache
  const HostCacheStats before = host_cache_stats();
  const long second = faults_to_fill();  // the same block again
  INFO("faults: first fill " << first << ", second " << second);
  CHECK(first >= 16 * 1024 - 64);  // every 4 KiB page of 64 MiB once
  CHECK(second < 256);
  CHECK(host_cache_stats().reused == before.reused + 1);
  CHECK(host_cache_stats().mapped == before.mapped);
}

TEST_CASE("util: the host block cache gives back blocks that a whole step did not reuse", "[util]") {
  start_clean(true);
  faults_to_fill();
  const double cached = rss_mb();
  CHECK(host_cache_stats().cached_bytes == kFloats * 4);
  end_host_cache_step();  // the step it was freed in ends: still kept for the next
  CHECK(host_cache_stats().cached_bytes == kFloats * 4);
  CHECK(rss_mb() > cached - 8);
  end_host_cache_step();  // a whole step passed without it
  const double after = rss_mb();
  INFO("resident: " << cached << " MiB cached, " << after << " MiB after");
  CHECK(host_cache_stats().cached_bytes == 0);
  CHECK(after < cached - kMiB + 8);

  // A block reused in a step is freed again there: it stays.
  faults_to_fill();
  end_host_cache_step();
  faults_to_fill();
  end_host_cache_step();
  CHECK(host_cache_stats().cached_bytes == kFloats * 4);
}

TEST_CASE("util: the host block cache keeps mapped no more than the last step had in use at most", "[util]") {
  start_clean(true);
  std::vector<at::Tensor> state, transient;
  faults_to_fill(&state);  // stays in use, as a model's weights do
  faults_to_fill(&transient);
  faults_to_fill(&transient);  // a rare step: 128 MiB more at once (a rollback's second copy)
  transient.clear();
  end_host_cache_step();  // freed in that step: kept for the next
  REQUIRE(host_cache_stats().cached_bytes == 2 * kFloats * 4);
  const double rare = rss_mb();
  const HostCacheStats before = host_cache_stats();
  // The next step takes 64 MiB twice, one after the other: the two cached blocks serve it in turn (equal
  // sizes rotate), so each was taken, yet 64 MiB at once was all it needed.
  faults_to_fill();
  faults_to_fill();
  CHECK(host_cache_stats().reused == before.reused + 2);
  CHECK(host_cache_stats().mapped == before.mapped);
  end_host_cache_step();
  const double after = rss_mb();
  INFO("resident: " << rare << " MiB after the rare step, " << after << " MiB after the next");
  CHECK(host_cache_stats().cached_bytes == kFloats * 4);
  CHECK(after < rare - kMiB + 8);
  faults_to_fill();  // and the block kept serves the steps after without a new mapping
  CHECK(host_cache_stats().mapped == before.mapped);
}

TEST_CASE("util: the host block cache takes the smallest cached block that is at most a quarter larger", "[util]") {
  start_clean(true);
  at::Tensor big = at::empty({kFloats}), small = at::empty({kFloats / 2});
  void* big_block = big.data_ptr();
  void* small_block = small.data_ptr();
  big = at::Tensor();
  small = at::Tensor();
  REQUIRE(host_cache_stats().cached_bytes == kFloats * 6);
  at::Tensor half = at::empty({kFloats / 2});  // both fit: the smaller one serves it
  CHECK(half.data_ptr() == small_block);
  const HostCacheStats before = host_cache_stats();
  at::Tensor third = at::empty({kFloats / 3});  // 64 MiB is 3x that: not taken
  CHECK(third.data_ptr() != big_block);
  CHECK(host_cache_stats().mapped == before.mapped + 1);
  start_clean(true);
  big = at::empty({kFloats});
  big_block = big.data_ptr();
  big = at::Tensor();
  at::Tensor near = at::empty({kFloats * 7 / 8});  // 1/7 smaller: the big block serves it
  CHECK(near.data_ptr() == big_block);
  // Below 128 KiB tensors come from malloc and the cache does not count them.
  const HostCacheStats now = host_cache_stats();
  at::Tensor tiny = at::ones({1000});
  CHECK(host_cache_stats().in_use_bytes == now.in_use_bytes);
  CHECK(host_cache_stats().mapped == now.mapped);
}

TEST_CASE("util: without the cache every freed block goes back to the OS at once", "[util]") {
  start_clean(false);
  std::vector<at::Tensor> held;
  faults_to_fill(&held);
  const double holding = rss_mb();
  held.clear();
  const double freed = rss_mb();
  INFO("resident: " << holding << " MiB holding 64 MiB, " << freed << " MiB after freeing it");
  CHECK(freed < holding - kMiB + 8);
  CHECK(host_cache_stats().cached_bytes == 0);
  CHECK(faults_to_fill() >= 16 * 1024 - 64);  // and the next one faults every page in again
  install_host_block_cache(true);
}

TEST_CASE("util: releasing the host block cache gives back every cached block", "[util]") {
  start_clean(true);
  std::vector<at::Tensor> held;
  faults_to_fill(&held);
  faults_to_fill(&held);
  const double holding = rss_mb();
  held.clear();
  CHECK(host_cache_stats().cached_bytes == 2 * kFloats * 4);
  release_host_block_cache();
  const double released = rss_mb();
  INFO("resident: " << holding << " MiB holding 128 MiB, " << released << " MiB after the release");
  CHECK(host_cache_stats().cached_bytes == 0);
  CHECK(released < holding - 2 * kMiB + 8);
}

TEST_CASE("util: the host block cache gives back the oldest blocks before mapping past the most ever in use",
          "[util]") {
  start_clean(true);
  std::vector<at::Tensor> held;
  faults_to_fill(&held);
  faults_to_fill(&held);  // 128 MiB more in use at once than at the start
  void* second = held[1].data_ptr();
  held.clear();  // the first freed first: the oldest
  REQUIRE(host_cache_stats().cached_bytes == 2 * kFloats * 4);
  // 48 MiB fits neither cached block (each more than a quarter larger): a new mapping, for which the
  // first block goes back, as 48 + 2 x 64 MiB would be more than was ever in use.
  const HostCacheStats before = host_cache_stats();
  at::Tensor third = at::empty({kFloats * 3 / 4});
  const HostCacheStats after = host_cache_stats();
  CHECK(after.mapped == before.mapped + 1);
  CHECK(after.unmapped == before.unmapped + 1);
  CHECK(after.cached_bytes == kFloats * 4);
  CHECK(after.in_use_bytes + after.cached_bytes <= after.peak_in_use_bytes);
  at::Tensor again = at::empty({kFloats});
  CHECK(again.data_ptr() == second);  // the one kept is the one freed last
}
