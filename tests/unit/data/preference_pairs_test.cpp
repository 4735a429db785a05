// Preference pairs on disk and in a batch (data/preference_pairs.h): chosen rows first, then rejected,
// right-padded; targets only where a completion token is predicted; the files checked on opening.
#include <catch2/catch.hpp>

#include "data/preference_pairs.h"
#include "test_util.h"
#include "util/ignore_index.h"

using namespace gputrain;
using Catch::Matchers::Contains;

TEST_CASE("preference pairs: written, read back, and batched as TRL's completion mask") {
  test::TempDir dir;
  PreferenceSidecar info;
  info.tokenizer = "bytes", info.vocab_size = 300;
  PreferencePairWriter w(dir.path().string(), "train", info);
  w.add({1, 10, 11}, {20, 21, 2}, {30, 2});
  w.add({1, 12}, {22, 2}, {31, 32, 33, 2});
  w.finish();
  ModelSettings m;
  m.vocab_size = 300, m.seq_len = 8;
  PreferencePairs pairs(dir.file("train_pairs.bin"), m, "data.train");
  REQUIRE(pairs.window_count() == 2);
  CHECK(pairs.info().longest == 6);
  const PreferencePair p = pairs.pair(1);
  CHECK(std::vector<uint32_t>(p.rejected.begin(), p.rejected.end()) == std::vector<uint32_t>{31, 32, 33, 2});

  const std::vector<uint64_t> keys = {1, 0};
  const Batch b = preference_batch(pairs, keys, 8);
  REQUIRE(b.pairs == 2);
  REQUIRE(b.input.sizes() == torch::IntArrayRef({4, 8}));
  const torch::Tensor ig = torch::full({1}, kIgnoreIndex, torch::kLong);
  auto row = [](std::vector<int64_t> v) { return torch::tensor(v, torch::kLong); };
  // Row 0: pair 1's prompt + chosen; row 3: pair 0's prompt + rejected.
  CHECK(b.input[0].equal(row({1, 12, 22, 2, 0, 0, 0, 0})));
  CHECK(b.target[0].equal(row({kIgnoreIndex, 22, 2, kIgnoreIndex, kIgnoreIndex, kIgnoreIndex, kIgnoreIndex, kIgnoreIndex})));
  CHECK(b.input[3].equal(row({1, 10, 11, 30, 2, 0, 0, 0})));
  CHECK(b.target[3].equal(row({kIgnoreIndex, kIgnoreIndex, 30, 2, kIgnoreIndex, kIgnoreIndex, kIgnoreIndex, kIgnoreIndex})));
  CHECK(b.lengths.equal(row({4, 6, 6, 5})));
  CHECK(b.target_count == 2 + 3 + 4 + 2);

  // Ids past model.vocab_size, a pair longer than model.seq_len + 1, a cut index: exit-2 errors.
  m.vocab_size = 200;
  CHECK_THAT(test::exit2_error_of([&] { PreferencePairs(dir.file("train_pairs.bin"), m, "data.train"); }),
             Contains("model.vocab_size to at least 300"));
  m.vocab_size = 300, m.seq_len = 4;
  CHECK_THAT(test::exit2_error_of([&] { PreferencePairs(dir.file("train_pairs.bin"), m, "data.train"); }),
             Contains("needs model.seq_len 5") && Contains("--max-length 5"));
  m.seq_len = 8;
  const std::string idx = test::read_file(dir.file("train_pairs.idx"));
  test::write_file(dir.file("train_pairs.idx"), idx.substr(0, idx.size() - 8));
  CHECK_THAT(test::exit2_error_of([&] { PreferencePairs(dir.file("train_pairs.bin"), m, "data.train"); }),
             Contains("truncated?"));
}
