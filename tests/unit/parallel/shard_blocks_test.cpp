// ZeRO-3 shards that start on a quantization block (parallel/tensor_shard.h ShardBlocks): the rows
// each rank holds, and adamw8bit updating every rank's shard exactly as one process updates the
// whole tensor, its 8-bit codes and block scales being the whole's, cut at the shard's rows.
#include <catch2/catch.hpp>
#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "optim/make_optimizer.h"
#include "parallel/fully_sharded.h"
#include "parallel/tensor_shard.h"

using namespace gputrain;

TEST_CASE("shard blocks: shards of adamw8bit's quantized parameters start on a 256-element block", "[parallel]") {
  OptimSettings o;
  o.name = OptimName::kAdamW8bit;
  o.adamw8bit.min_8bit_size = 100;
  const ShardBlocks blocks = zero3_shard_blocks(o);
  CHECK(blocks.block == 256);
  CHECK(blocks.row_multiple("w", 100, 96) == 8);    // 8 rows of 96 = 3 blocks
  CHECK(blocks.row_multiple("w", 100, 768) == 1);   // every row is 3 blocks
  CHECK(blocks.row_multiple("b", 300, 1) == 256);   // a vector: 256 rows
  CHECK(blocks.row_multiple("small", 9, 10) == 1);  // 90 elements: 32-bit moments
  o.adamw8bit.embeddings_32bit = true;
  CHECK(zero3_shard_blocks(o).row_multiple("transformer.wte.weight", 256, 32) == 1);
  o.name = OptimName::kAdamW;
  CHECK(zero3_shard_blocks(o).row_multiple("w", 100, 96) == 1);

  // 256 rows of 32 over 3 ranks: ceil(256 / 3) = 86 rounded up to 88.
  const RankRows last = rank_rows(256, 2, 3, 8);
  CHECK(last.shard_rows == 88);
  CHECK(last.first == 176);
  CHECK(last.count == 80);
  // A vector of 300 over 3 ranks in shards of 256: the third rank holds padding only.
  CHECK(rank_rows(300, 1, 3, 256).count == 44);
  CHECK(rank_rows(300, 2, 3, 256).count == 0);
  CHECK(rank_rows(300, 2, 3, 256).first == 300);
}

TEST_CASE("shard blocks: adamw8bit on 3 ranks' shards updates as on the whole tensors, bit for bit", "[parallel]") {
  OptimSettings o;
  o.name = OptimName::kAdamW8bit;
  o.adamw8bit.min_8bit_size = 100;
  const ShardBlocks blocks = zero3_shard_blocks(o);
  const std::vector<std::string> names = {"w", "b", "small"};
  at::manual_seed(3);
  // 100 rows of 96 (shards of 40 rows, the last 20 real); 300 elements (256, 44, none); 5 x 6 whole.
  const std::vector<at::Tensor> initial = {at::randn({100, 96}), at::randn({300}), at::randn({5, 6})};
  const int ranks = 3;

  std::vector<at::Tensor> whole;
  for (const auto& t : initial) whole.push_back(t.clone().requires_grad_(true));
  auto one = make_optimizer({ParamGroup{"decay", names, whole, 0.1, 1.0}}, o);

  struct Rank {
    std::vector<at::Tensor> shards;
    std::vector<RankRows> rows;
    std::unique_ptr<Optimizer> optimizer;
  };
  std::vector<Rank> rank(ranks);
  for (int r = 0; r < ranks; ++r) {
    RowSharding sharding;
    for (size_t i = 0; i < initial.size(); ++i) {
      const at::Tensor& t = initial[i];
      const int64_t row_numel = t.numel() / t.size(0);
      const RankRows rr = rank_rows(t.size(0), r, ranks, blocks.row_multiple(names[i], t.size(0), row_numel));
      std::vector<int64_t> shape = t.sizes().vec();
      shape[0] = rr.shard_rows;
      at::Tensor shard = at::zeros(shape);
      if (rr.count > 0) shard.narrow(0, 0, rr.count).copy_(t.narrow(0, rr.first, rr.count));
      rank[r].shards.push_back(shard.requires_grad_(true));
      rank[r].rows.push_back(rr);
      sharding.params[names[i]] = RowShard{t.size(0), rr.count};
    }
    rank[r].optimizer = make_optimizer({ParamGroup{"decay", names, rank[r].shards, 0.1, 1.0}}, o, sharding);
  }
  CHECK(rank[2].optimizer->describe() == one->describe());  // decided by the whole tensors' sizes

  for (int step = 0; step < 5; ++step) {
    for (size_t i = 0; i < initial.size(); ++i) {
      const at::Tensor g = at::randn(initial[i].sizes());
      whole[i].mutable_grad() = g;
      for (auto& k : rank) {
        const RankRows& rr = k.rows[i];
        at::Tensor part = at::zeros_like(k.shards[i]);
        if (rr.count > 0) part.narrow(0, 0, rr.count).copy_(g.narrow(0, rr.first, rr.count));
        k.shards[i].mutable_grad() = part;
      }
    }
    one->step(1e-2);
    for (auto& k : rank) k.optimizer->step(1e-2);
  }

  std::map<std::string, at::Tensor> state;
  for (const auto& e : one->state()) state[e.name] = e.tensor;
  for (int r = 0; r < ranks; ++r)
    for (size_t i = 0; i < initial.size(); ++i) {
      INFO("rank " << r << ", " << names[i]);
      const RankRows& rr = rank[r].rows[i];
      const at::Tensor& shard = rank[r].shards[i];
      CHECK(at::equal(shard.narrow(0, 0, rr.count), whole[i].narrow(0, rr.first, rr.count)));
      CHECK(shard.narrow(0, rr.count, rr.shard_rows - rr.count).abs().sum().item<double>() == 0);  // padding stays 0
      for (const auto& e : rank[r].optimizer->state()) {
        if (e.name.rfind(names[i] + ".", 0) != 0 || e.layout == StateLayout::kWhole) continue;
        INFO(e.name);
        const at::Tensor& all = state.at(e.name);
        if (e.layout == StateLayout::kRows) {
          CHECK(at::equal(e.tensor.narrow(0, 0, rr.count), all.narrow(0, rr.first, rr.count)));
        } else {  // the shard's blocks are the whole's blocks from its first row on
          CHECK(e.tensor.size(0) * 256 == shard.numel());
          const int64_t first = std::min(r * e.tensor.size(0), all.size(0));
          const int64_t count = std::min(all.size(0) - first, e.tensor.size(0));
          CHECK(at::equal(e.tensor.narrow(0, 0, count), all.narrow(0, first, count)));
        }
      }
    }
}
