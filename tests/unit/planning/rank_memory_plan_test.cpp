// The per-rank memory plan under ZeRO-3 (planning/rank_memory_plan.h): the largest gathered unit is a
// block, not a vocabulary table used part by part (unless reshard_after_forward keeps tables whole),
// a 4-bit base is held and gathered at its 4-bit size, and DPO's frozen reference copy is a share.
#include <catch2/catch.hpp>

#include "model/quantized_weight.h"
#include "planning/rank_memory_plan.h"
#include "test_util.h"

using namespace gputrain;

namespace {

// A GPT whose vocabulary table (50,000 x 64 floats, 12.2 MiB) dwarfs a block (about 0.2 MiB).
Settings big_vocabulary() {
  Settings s;
  s.model = test::model_settings(50000, 8, 2, 4, 64);
  s.parallel.zero = 3;
  return s;
}

}  // namespace

TEST_CASE("rank memory plan: ZeRO-3's largest unit is a block, the tables being used by parts", "[plan]") {
  Settings s = big_vocabulary();
  const Grid dp2(2, 1, 1);
  const double table = 50000.0 * 64 * 4, block_fp32 = 12.0 * 64 * 64 * 4;
  const RankHoldings parts = plan_rank_memory(s, dp2).front();
  CHECK(parts.largest_unit < 1.2 * block_fp32);
  CHECK(parts.largest_unit > block_fp32);
  // Kept whole from forward to backward, the tables are gathered as units are.
  s.parallel.reshard_after_forward = false;
  CHECK(plan_rank_memory(s, dp2).front().largest_unit >= table);
}

TEST_CASE("rank memory plan: a ZeRO-3 rank holds its share of a 4-bit base and gathers a block at its 4-bit size",
          "[plan][quantize]") {
  Settings s = big_vocabulary();
  s.model.lora.rank = 4;
  s.model.quantize.base = QuantBase::kNf4;
  const double block_4bit =
      static_cast<double>(quantized_base_bytes(s.model, "transformer.h.0.attn.c_attn.weight", {192, 64}) +
                          quantized_base_bytes(s.model, "transformer.h.0.attn.c_proj.weight", {64, 64}) +
                          quantized_base_bytes(s.model, "transformer.h.0.mlp.c_fc.weight", {256, 64}) +
                          quantized_base_bytes(s.model, "transformer.h.0.mlp.c_proj.weight", {64, 256}));
  const RankHoldings one = plan_rank_memory(s, Grid(2, 1, 1)).front();
  s.parallel.zero = 2;
  const RankHoldings two = plan_rank_memory(s, Grid(2, 1, 1)).front();
  // Besides the 4-bit Linears, a block gathers its norms, biases and adapters (tens of KiB; the block in
  // fp32 would be 192 KiB).
  CHECK(one.largest_unit > block_4bit);
  CHECK(one.largest_unit < block_4bit + 64 * 1024);
  // ZeRO-3 holds half of what ZeRO-2 holds whole, the base included.
  CHECK(one.weights == Approx(two.weights / 2).epsilon(1e-9));
}

TEST_CASE("rank memory plan: DPO's frozen reference copy is counted as laid out as the policy", "[plan]") {
  Settings s = big_vocabulary();
  s.train.objective = TrainObjective::kDpo;
  const Grid dp2(2, 1, 1);
  const RankHoldings zero3 = plan_rank_memory(s, dp2).front();
  CHECK(zero3.reference == Approx(zero3.weights).epsilon(1e-12));
  s.parallel.zero = 2;
  const RankHoldings zero2 = plan_rank_memory(s, dp2).front();
  CHECK(zero3.reference == Approx(zero2.reference / 2).epsilon(1e-9));  // a shard per rank under ZeRO-3
  CHECK_THAT(rank_memory_table(s, dp2), Catch::Matchers::Contains("reference copy MiB"));
  // No copy through the steps: LoRA's adapters-off base, or a table computed before them.
  s.train.preference.reference = PreferenceReference::kPrecomputed;
  CHECK(plan_rank_memory(s, dp2).front().reference == 0);
  s.train.preference.reference = PreferenceReference::kAuto;
  s.model.lora.rank = 4;
  CHECK(plan_rank_memory(s, dp2).front().reference == 0);
  CHECK_THAT(rank_memory_table(s, dp2), !Catch::Matchers::Contains("reference copy"));
  s.train.objective = TrainObjective::kOrpo;
  s.model.lora.rank = 0;
  CHECK(plan_rank_memory(s, dp2).front().reference == 0);
}
