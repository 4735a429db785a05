// Preference pairs on disk and in a batch (data/preference_pairs.h): chosen rows first, then rejected,
// right-padded or packed; targets only where a completion token is predicted; the files checked on opening.
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
  PreferencePairs pairs(dir.file("train_pairs.bin"), m, "data.train", /*shared_prompt=*/false);
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
  CHECK(b.target[0].equal(
      row({kIgnoreIndex, 22, 2, kIgnoreIndex, kIgnoreIndex, kIgnoreIndex, kIgnoreIndex, kIgnoreIndex})));
  CHECK(b.input[3].equal(row({1, 10, 11, 30, 2, 0, 0, 0})));
  CHECK(b.target[3].equal(
      row({kIgnoreIndex, kIgnoreIndex, 30, 2, kIgnoreIndex, kIgnoreIndex, kIgnoreIndex, kIgnoreIndex})));
  CHECK(b.lengths.equal(row({4, 6, 6, 5})));
  CHECK(b.target_count == 2 + 3 + 4 + 2);
  CHECK_FALSE(b.token_layout.defined());

  // The prompt computed once: a row per pair, the rejected tokens in branch 2 at the positions after
  // the prompt; the first rejected token predicted at the prompt's last position, as the chosen's.
  const PreferencePairs shared(dir.file("train_pairs.bin"), m, "data.train", /*shared_prompt=*/true);
  const Batch s = preference_batch(shared, keys, 8);
  REQUIRE(s.input.sizes() == torch::IntArrayRef({2, 8}));
  REQUIRE(s.target.sizes() == torch::IntArrayRef({4, 8}));
  CHECK(s.input[0].equal(row({1, 12, 22, 2, 31, 32, 33, 2})));
  CHECK(s.token_layout.positions[0].equal(row({0, 1, 2, 3, 2, 3, 4, 5})));
  CHECK(s.token_layout.branches[0].equal(row({0, 0, 1, 1, 2, 2, 2, 2})));
  CHECK(s.target[0].equal(
      row({kIgnoreIndex, 22, 2, kIgnoreIndex, kIgnoreIndex, kIgnoreIndex, kIgnoreIndex, kIgnoreIndex})));
  CHECK(s.target[2].equal(row({kIgnoreIndex, 31, kIgnoreIndex, kIgnoreIndex, 32, 33, 2, kIgnoreIndex})));
  // Pair 0: 3 + 3 + 2 tokens.
  CHECK(s.input[1].equal(row({1, 10, 11, 20, 21, 2, 30, 2})));
  CHECK(s.target[3].equal(
      row({kIgnoreIndex, kIgnoreIndex, 30, kIgnoreIndex, kIgnoreIndex, kIgnoreIndex, 2, kIgnoreIndex})));
  CHECK(s.token_layout.positions[1].equal(row({0, 1, 2, 3, 4, 5, 3, 4})));
  CHECK(s.lengths.equal(row({4, 6, 6, 5})));
  CHECK(s.target_count == b.target_count);

  // Packed (data.*.pack_pairs), two rows a pair: the four sequences one after another in rows of 12,
  // the next row when one does not fit; each a document from position 0, the padding one more.
  m.seq_len = 12;
  const PreferencePairs packed(dir.file("train_pairs.bin"), m, "data.train", /*shared_prompt=*/false, /*pack=*/true);
  const Batch k = preference_batch(packed, keys, 12);
  REQUIRE(k.input.sizes() == torch::IntArrayRef({2, 12}));
  REQUIRE(k.target.sizes() == torch::IntArrayRef({4, 12}));
  CHECK(k.input[0].equal(row({1, 12, 22, 2, 1, 10, 11, 20, 21, 2, 0, 0})));
  CHECK(k.token_layout.positions[0].equal(row({0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 0, 1})));
  CHECK(k.input[1].equal(row({1, 12, 31, 32, 33, 2, 1, 10, 11, 30, 2, 0})));
  CHECK(k.token_layout.positions[1].equal(row({0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 0})));
  CHECK_FALSE(k.token_layout.branches.defined());
  CHECK(k.target_rows.equal(row({0, 0, 1, 1})));
  CHECK(k.target_offsets.equal(row({0, 4, 0, 6})));
  const int64_t I = kIgnoreIndex;
  CHECK(k.target[1].equal(row({I, I, I, I, I, I, 20, 21, 2, I, I, I})));
  CHECK(k.target[3].equal(row({I, I, I, I, I, I, I, I, 30, 2, I, I})));
  CHECK(k.lengths.equal(b.lengths));
  CHECK(k.target_count == b.target_count);
  // Packed with the prompt computed once: both pairs in one row of 16, each with its branches.
  m.seq_len = 16;
  const PreferencePairs both(dir.file("train_pairs.bin"), m, "data.train", /*shared_prompt=*/true, /*pack=*/true);
  const Batch q = preference_batch(both, keys, 16);
  REQUIRE(q.input.sizes() == torch::IntArrayRef({1, 16}));
  CHECK(q.input[0].equal(row({1, 12, 22, 2, 31, 32, 33, 2, 1, 10, 11, 20, 21, 2, 30, 2})));
  CHECK(q.token_layout.positions[0].equal(row({0, 1, 2, 3, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5, 3, 4})));
  CHECK(q.token_layout.branches[0].equal(row({0, 0, 1, 1, 2, 2, 2, 2, 0, 0, 0, 1, 1, 1, 2, 2})));
  CHECK(q.target_rows.equal(row({0, 0, 0, 0})));
  CHECK(q.target_offsets.equal(row({0, 8, 0, 8})));
  CHECK(q.target[3].equal(row({I, I, I, I, I, I, I, I, I, I, 30, I, I, I, 2, I})));
  CHECK(q.target_count == b.target_count);
  m.seq_len = 8;

  // A file that is not there, ids past model.vocab_size, a pair longer than model.seq_len + 1, a cut index: exit-2
  // errors.
  CHECK_THAT(test::exit2_error_of([&] { PreferencePairs(dir.file("val_pairs.bin"), m, "data.eval"); }),
             Contains("data.eval.path: '" + dir.file("val_pairs.bin") + "' does not exist") &&
                 Contains("--format preference"));
  m.vocab_size = 200;
  CHECK_THAT(test::exit2_error_of([&] { PreferencePairs(dir.file("train_pairs.bin"), m, "data.train"); }),
             Contains("model.vocab_size to at least 300"));
  m.vocab_size = 300, m.seq_len = 4;
  CHECK_THAT(test::exit2_error_of([&] { PreferencePairs(dir.file("train_pairs.bin"), m, "data.train", false); }),
             Contains("needs model.seq_len 5"));
  m.seq_len = 6;  // a row of prompt + chosen + rejected is 8 tokens; two rows, 6 at most
  CHECK_NOTHROW(PreferencePairs(dir.file("train_pairs.bin"), m, "data.train", false));
  CHECK_THAT(test::exit2_error_of([&] { PreferencePairs(dir.file("train_pairs.bin"), m, "data.train"); }),
             Contains("needs model.seq_len 7") && Contains("data.train.shared_prompt: false"));
  m.seq_len = 8;
  const std::string idx = test::read_file(dir.file("train_pairs.idx"));
  test::write_file(dir.file("train_pairs.idx"), idx.substr(0, idx.size() - 8));
  CHECK_THAT(test::exit2_error_of([&] { PreferencePairs(dir.file("train_pairs.bin"), m, "data.train"); }),
             Contains("truncated?"));
}
