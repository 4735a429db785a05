// The batch size finder: the largest power of two, then multiple of 8, that
// divides the global batch and fits; grad_accum_steps keeps the global batch.
#include <catch2/catch.hpp>

#include "train/batch_finder.h"
#include "planning/memory_plan.h"
#include "util/error.h"

using namespace gputrain;

TEST_CASE("batch finder: powers of two, then multiples of 8, under a fake memory limit", "[train][batch]") {
  auto under = [](int64_t limit) { return [limit](int64_t b) { return b <= limit; }; };
  BatchChoice c = find_batch_size(512, under(100));
  CHECK(c.batch == 64);  // 128 fails; multiples of 8 in (64, 128) dividing 512: none
  CHECK(c.grad_accum == 8);
  c = find_batch_size(480, under(100));
  CHECK(c.batch == 96);  // 32 fits, 64 does not divide 480; 96 (a multiple of 8 dividing 480) fits
  CHECK(c.grad_accum == 5);
  c = find_batch_size(96, under(1000));
  CHECK(c.batch == 96);  // the whole global batch in one micro-batch
  CHECK(c.grad_accum == 1);
  c = find_batch_size(512, under(37));
  CHECK(c.batch == 32);
  CHECK(c.tried.back() == std::pair<int64_t, bool>{64, false});
  CHECK_THAT(c.describe(), Catch::Contains("auto -> 32 (grad_accum_steps 16)"));
  CHECK_THROWS_WITH(find_batch_size(64, under(0)), Catch::Contains("not even a micro-batch of 1"));
}

TEST_CASE("batch finder on CPU: the memory plan against the budget picks the batch", "[train][batch]") {
  Settings s;
  s.model.vocab_size = 8192, s.model.seq_len = 256, s.model.n_layer = 4, s.model.n_head = 4, s.model.d_model = 256;
  const double per_sequence = plan_memory(s, 2).total() - plan_memory(s, 1).total();
  const double fixed = plan_memory(s, 1).total() - per_sequence;
  CHECK(per_sequence > 0);
  // A budget with room for 20 sequences: 16 fits, 32 does not, and 24 (the
  // multiple of 8 between them that divides 96) does not either.
  s.run.memory_budget_mb = static_cast<int64_t>((fixed + 20.5 * per_sequence) / (1024 * 1024));
  const double budget = cpu_memory_budget_bytes(s);
  BatchChoice c = find_batch_size(96, [&](int64_t b) { return plan_memory(s, b).total() <= budget; });
  CHECK(c.batch == 16);
  CHECK(c.grad_accum == 6);
  // Checkpointing lowers the per-sequence cost, so 24 fits the same budget.
  s.train.gradient_checkpointing = CheckpointingPolicy::kFull;
  c = find_batch_size(96, [&](int64_t b) { return plan_memory(s, b).total() <= budget; });
  CHECK(c.batch == 24);
  CHECK(c.grad_accum == 4);
}

TEST_CASE("memory plan: parameter count is exact and components follow the recipe", "[train][memory]") {
  Settings s;
  s.model.vocab_size = 50257, s.model.pad_vocab_to_multiple_of = 64, s.model.seq_len = 1024;
  const MemoryPlan p = plan_memory(s, 8);
  CHECK(p.parameters == 124475904);  // GPT-2 124M with the 50304-row embedding, as nanoGPT counts it
  CHECK(p.weights == Approx(4.0 * p.parameters));
  CHECK(p.optimizer == Approx(8.0 * p.parameters));
  s.train.gradient_checkpointing = CheckpointingPolicy::kFull;
  const MemoryPlan full = plan_memory(s, 8);
  CHECK(full.activations < 0.25 * full.activations_plain);
  s.train.gradient_checkpointing = CheckpointingPolicy::kSelective;
  const MemoryPlan half = plan_memory(s, 8);
  CHECK(half.activations < p.activations);
  CHECK(half.activations > full.activations);
  s.precision.mode = PrecisionMode::kBf16Pure;
  CHECK(plan_memory(s, 8).weights == Approx(2.0 * p.parameters));
}

TEST_CASE("memory plan: LoRA keeps gradients and optimizer state for the adapters only, experts count whole",
          "[train][memory][lora][moe]") {
  Settings s;
  s.model.arch = ModelArch::kLlama;
  const MemoryPlan full = plan_memory(s, 8);
  s.model.lora.rank = 8;
  const MemoryPlan lora = plan_memory(s, 8);
  // Rank 8 on c_attn (768 -> 2304 rows) and c_proj (768 -> 768) of 12 blocks.
  const double adapters = 12.0 * (8 * (768 + 2304) + 8 * (768 + 768));
  CHECK(lora.parameters == full.parameters + static_cast<int64_t>(adapters));
  CHECK(lora.gradients == Approx(4.0 * adapters));
  CHECK(lora.optimizer == Approx(8.0 * adapters + 8.0 * 48));  // moments + a step counter per adapter tensor
  CHECK(lora.weights == Approx(4.0 * static_cast<double>(lora.parameters)));  // the frozen base is still held
  s.model.lora.rank = 0;
  s.model.moe.experts = 4;  // every block: 4 expert MLPs instead of 1
  CHECK(plan_memory(s, 8).parameters > 3 * full.parameters / 2);
  CHECK(plan_memory(s, 8).activations > full.activations);  // top 2 of them per token
}
