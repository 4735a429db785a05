// A vocabulary table used by parts (parallel/vocabulary_parts.h) against the whole table: three ranks
// (threads over Gloo) each hold a third of a 37-row table (13, 13 and 11 rows, the last padded; sent
// in pieces) and their own 20 tokens. Their head's losses, logits and gradients must be one process's
// cross-entropy of y W^T over all 60 tokens, their embeddings the rows W[tokens], and the table's
// gradient from both (tied) the whole one's rows.
#include <catch2/catch.hpp>
#include <ATen/ATen.h>

#include "model/cross_entropy.h"
#include "parallel/vocabulary_parts.h"
#include "thread_ranks.h"
#include "util/ignore_index.h"

using namespace gputrain;

namespace {

constexpr int kRanks = 3;
constexpr int64_t kVocab = 37, kShardRows = 13, kWidth = 8, kTokens = 20;
constexpr int64_t kPieceRows = 5;  // each rank's rows in pieces of 5, 5 and 3 (the last rank's: 5, 5, 1)

struct Whole {
  torch::Tensor y, w, targets, tokens, upstream;  // upstream: the gradient the embedding gets
  double loss = 0;
  // Of the loss times 0.5 (a loss scale) plus sum(W[tokens] * upstream).
  torch::Tensor y_grad, w_grad, logits, embedded;
};

Whole whole_head(torch::ScalarType dtype) {
  torch::manual_seed(3);
  Whole r;
  r.y = torch::randn({kRanks * kTokens, kWidth});
  r.w = torch::randn({kVocab, kWidth});
  r.targets = torch::randint(0, kVocab, {kRanks * kTokens}, torch::kLong);
  r.targets.index_put_({torch::tensor({2, 7, 8, 45})}, kIgnoreIndex);  // rows without a target
  r.tokens = torch::randint(0, kVocab, {kRanks * kTokens}, torch::kLong);
  r.tokens.index_put_({torch::tensor({1, 30, 59})}, 36);  // the last row, three ranks' tokens
  r.upstream = torch::randn({kRanks * kTokens, kWidth});
  const torch::Tensor y = r.y.clone().requires_grad_(), w = r.w.clone().requires_grad_();
  r.logits = at::matmul(y.to(dtype), w.to(dtype).t());
  const torch::Tensor loss = cross_entropy_sum_reference(r.logits, r.targets, kIgnoreIndex);
  const torch::Tensor embedded = w.to(dtype).index_select(0, r.tokens);
  (loss * 0.5 + (embedded.to(torch::kFloat) * r.upstream).sum()).backward();
  r.embedded = embedded.detach();
  r.loss = loss.item<double>();
  r.y_grad = y.grad();
  r.w_grad = w.grad();
  r.logits = r.logits.detach();
  return r;
}

// What one rank computes from its shard (Catch2 checks run on the test's thread, after the ranks).
struct RankResult {
  double loss = 0;
  torch::Tensor y_grad, shard_grad, logits, embedded;
};

int64_t first_row(int rank) { return rank * kShardRows; }
int64_t real_rows(int rank) { return std::min(kShardRows, kVocab - first_row(rank)); }

RankResult run_rank(const Whole& whole, Communicator& world, int rank, torch::ScalarType dtype) {
  auto group = test::whole_group(world, "dp");
  torch::Tensor shard = torch::zeros({kShardRows, kWidth});
  shard.narrow(0, 0, real_rows(rank)).copy_(whole.w.narrow(0, first_row(rank), real_rows(rank)));
  shard.requires_grad_();
  const VocabularyRows rows{group.get(), kVocab, kShardRows, dtype, torch::kCPU, nullptr, kPieceRows};
  // Each rank's own tokens, as data parallelism gives them.
  const torch::Tensor mine = whole.y.narrow(0, rank * kTokens, kTokens);
  const torch::Tensor y = mine.clone().requires_grad_();
  const torch::Tensor loss =
      sharded_head_loss_sum(y, shard, whole.targets.narrow(0, rank * kTokens, kTokens), rows, kIgnoreIndex);
  const torch::Tensor embedded = sharded_embedding(whole.tokens.narrow(0, rank * kTokens, kTokens), shard, rows);
  (loss * 0.5 + (embedded.to(torch::kFloat) * whole.upstream.narrow(0, rank * kTokens, kTokens)).sum()).backward();
  return {loss.item<double>(), y.grad(), shard.grad(), sharded_head_logits(mine, shard, rows), embedded.detach()};
}

}  // namespace

TEST_CASE("vocabulary by parts: three ranks' rows give the whole table's head, embedding and gradients", "[parallel]") {
  at::set_num_threads(1);
  const auto dtype = GENERATE(torch::kFloat, torch::kBFloat16);
  const double tolerance = dtype == torch::kFloat ? 1e-5 : 2e-2;
  const Whole whole = whole_head(dtype);
  std::vector<RankResult> results(kRanks);
  test::run_thread_ranks(kRanks,
                         [&](int rank, Communicator& world) { results[rank] = run_rank(whole, world, rank, dtype); });
  double loss = 0;
  for (const RankResult& r : results) loss += r.loss;
  CHECK(loss == Approx(whole.loss).epsilon(tolerance));
  for (int rank = 0; rank < kRanks; ++rank) {
    const RankResult& r = results[static_cast<size_t>(rank)];
    const int64_t first = first_row(rank), count = real_rows(rank);
    CHECK(torch::allclose(r.y_grad, whole.y_grad.narrow(0, rank * kTokens, kTokens), tolerance, tolerance));
    // This rank's rows of the whole gradient, summed over every rank's tokens; the padding's stay zero.
    CHECK(
        torch::allclose(r.shard_grad.narrow(0, 0, count), whole.w_grad.narrow(0, first, count), tolerance, tolerance));
    CHECK(r.shard_grad.narrow(0, count, kShardRows - count).abs().sum().item<float>() == 0.0f);
    CHECK(r.logits.sizes() == torch::IntArrayRef({kTokens, kVocab}));
    CHECK(torch::allclose(r.logits.to(torch::kFloat), whole.logits.narrow(0, rank * kTokens, kTokens).to(torch::kFloat),
                          tolerance, tolerance));
    CHECK(torch::equal(r.embedded, whole.embedded.narrow(0, rank * kTokens, kTokens)));
  }
}
