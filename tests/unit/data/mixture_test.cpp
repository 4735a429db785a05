// Mixtures: the interleaving schedule gives each source its weight's share of
// every block of samples, consistently between at() and count(); the sampler
// reads each source's windows once per pass over that source.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include "data/loader.h"
#include "data/mixture.h"
#include "data/sampler.h"
#include "data/token_shard.h"
#include "test_util.h"

using namespace gputrain;
using namespace gputrain::test;

namespace {

// A shard of one document of `count` tokens counting up from `first` (every window starts on an id of its own).
std::string write_counting_shard(const TempDir& dir, const std::string& name, uint32_t first, uint32_t count) {
  ShardInfo info;
  info.tokenizer = "test", info.vocab_size = 1000, info.eot_token = 999;
  info.dtype = TokenDtype::kUint16;
  ShardWriter w(dir.file(name), info);
  std::vector<uint32_t> ids;
  for (uint32_t i = 0; i < count; ++i) ids.push_back(first + i);
  w.add_document();
  w.append(ids);
  w.finish();
  return dir.file(name);
}

}  // namespace

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

TEST_CASE("mixture sampler: each sample comes from its scheduled source, which it reads once per pass",
          "[data][mixture]") {
  TempDir dir;
  // Source 0's ids are 0..200, source 1's 500..600: a sample's first id names its source and window.
  DataSourceSettings d;
  d.format = DataFormat::kTokens;
  d.mixture = {{{write_counting_shard(dir, "a.bin", 0, 201)}, 2.0},
               {{write_counting_shard(dir, "b.bin", 500, 101)}, 1.0}};
  const ModelSettings m = model_settings(1000, 4, 1, 1, 8);
  MixtureWindows mix(d, m, "data.train");
  REQUIRE(mix.part_window_count(0) == 50);
  REQUIRE(mix.part_window_count(1) == 25);
  for (int64_t world : {1, 2}) {
    INFO("world " << world);
    // Each rank's loader over 3 passes of source 0 (300 samples in all); rank r reads its share of every
    // global batch: sample g of the mixture is rank (g % world)'s (g / world)-th.
    std::vector<std::vector<int64_t>> first_ids(static_cast<size_t>(world));
    for (int64_t rank = 0; rank < world; ++rank) {
      WindowSampler sampler(mix, SamplerOptions{7, kTrainStream, rank, world});
      LoaderOptions o;
      o.batch_size = 6 / world;
      o.seq_len = 4;
      BatchLoader loader(mix, sampler, o);
      for (int64_t b = 0; b < 300 / 6; ++b) {
        const Batch batch = loader.next();
        for (int64_t i = 0; i < batch.input.size(0); ++i) {
          const auto row = batch.input[i];
          CHECK(row.max().item<int64_t>() - row.min().item<int64_t>() == 3);  // one source's consecutive ids
          first_ids[static_cast<size_t>(rank)].push_back(row[0].item<int64_t>());
        }
      }
    }
    std::vector<std::set<int64_t>> pass(2);
    std::vector<int64_t> seen(2, 0);
    for (int64_t g = 0; g < 300; ++g) {
      const int64_t id = first_ids[static_cast<size_t>(g % world)][static_cast<size_t>(g / world)];
      const int source = id >= 500 ? 1 : 0;
      INFO("sample " << g << " first id " << id);
      REQUIRE(mix.schedule().at(g).first == source);  // what it read is what the schedule says
      // Within a pass over its source, no window twice; each pass reads all of them.
      const size_t k = static_cast<size_t>(source);
      CHECK(pass[k].insert(id).second);
      if (static_cast<int64_t>(pass[k].size()) == mix.part_window_count(source)) pass[k].clear();
      ++seen[k];
    }
    CHECK(seen[0] == mix.schedule().count(0, 300));
    CHECK(seen[1] == mix.schedule().count(1, 300));
    CHECK(std::abs(seen[0] - 200) <= 1);  // 2:1
  }
}
