// Pipeline parallelism against one process: 3 stages (threads of this
// process over Gloo on loopback) each build the same GPT, keep their stage's
// parameters and run one step of 4 micro-batches with gpipe and with 1f1b.
// The last stage's loss and every stage's gradients (the tied embedding's
// summed over the first and last stage) must equal one process's
// accumulated step, up to fp32 rounding; 1f1b must hold fewer micro-batches.
#include <catch2/catch.hpp>
#include <ATen/ATen.h>

#include <map>
#include <mutex>

#include "parallel/pipeline.h"
#include "test_util.h"
#include "thread_ranks.h"
#include "train/train_step.h"

using namespace gputrain;

namespace {

constexpr int kStages = 3;

struct StageResult {
  double loss = 0;
  std::map<std::string, torch::Tensor> grads;  // the parameters the stage holds
  int64_t peak_held = 0;
  int64_t freed = 0;  // parameters emptied by keep_stage
};

std::mutex build_lock;  // the threads share one generator: each builds the same weights under it
Gpt make_model() {
  std::lock_guard<std::mutex> lock(build_lock);
  torch::manual_seed(11);
  return Gpt(test::model_settings(64, 16, 5, 2, 32));
}

std::vector<Batch> micro_batches() {
  torch::manual_seed(3);
  std::vector<Batch> micro;
  for (int i = 0; i < 4; ++i) {
    auto tokens = torch::randint(0, 64, {2, 16}, torch::kLong), targets = torch::randint(0, 64, {2, 16}, torch::kLong);
    targets[0][i] = kIgnoreIndex;  // micro-batches of different target counts
    micro.push_back(Batch{tokens, targets, (targets != kIgnoreIndex).sum().item<int64_t>()});
  }
  return micro;
}

int64_t total_targets(const std::vector<Batch>& micro) {
  int64_t n = 0;
  for (const auto& b : micro) n += b.target_count;
  return n;
}

std::vector<StageResult> run_pipeline(PipelineSchedule schedule, const std::vector<Batch>& micro) {
  std::vector<StageResult> out(kStages);
  test::run_thread_ranks(kStages, [&](int rank, Communicator& world) {
    auto pp = test::whole_group(world, "pp");
    std::unique_ptr<Communicator> ends;
    if (rank == 0 || rank == kStages - 1) ends = world.subgroup({0, kStages - 1}, "tied-embedding");
    Gpt model = make_model();
    PipelineStepOptions o;
    o.schedule = schedule;
    o.stage = split_stages(model->cfg, kStages)[static_cast<size_t>(rank)];
    o.total_targets = total_targets(micro);
    const size_t before = model->named_parameters().size();
    const auto kept = keep_stage(model, o.stage);
    PipelineStepStats stats;
    torch::Tensor loss = pipeline_train_step(model, *pp, micro, o, &stats);
    if (ends) sum_tied_embedding_grads(model->transformer->wte->weight, *ends);
    StageResult& r = out[static_cast<size_t>(rank)];
    r.loss = loss.item<double>();
    r.peak_held = stats.peak_micro_batches_held;
    r.freed = static_cast<int64_t>(before - kept.size());
    for (const auto& name : kept) r.grads[name] = model->named_parameters()[name].grad().clone();
  });
  return out;
}

}  // namespace

TEST_CASE("pipeline: 3 stages give one process's loss and gradients under gpipe and 1f1b", "[parallel]") {
  at::set_num_threads(1);
  const auto micro = micro_batches();
  Gpt whole = make_model();
  const double ref_loss = accumulate_gradients(whole, micro).item<double>();

  for (PipelineSchedule schedule : {PipelineSchedule::kGpipe, PipelineSchedule::kOneFOneB}) {
    const bool gpipe = schedule == PipelineSchedule::kGpipe;
    INFO((gpipe ? "gpipe" : "1f1b"));
    const auto stages = run_pipeline(schedule, micro);
    CHECK(stages.back().loss == Approx(ref_loss).epsilon(1e-6));
    for (int s = 0; s + 1 < kStages; ++s) CHECK(stages[static_cast<size_t>(s)].loss == 0);
    size_t held = 0;
    for (int s = 0; s < kStages; ++s) {
      const StageResult& r = stages[static_cast<size_t>(s)];
      held += r.grads.size();
      CHECK(r.freed > 0);
      for (const auto& [name, grad] : r.grads) {
        INFO("stage " << s << " " << name);
        CHECK(test::relative_error(grad, whole->named_parameters()[name].grad()) < 1e-5);
      }
      // gpipe holds every micro-batch; 1f1b the warm-up depth stages - stage.
      CHECK(r.peak_held == peak_micro_batches_held(schedule, kStages, s, 4));
      CHECK(r.peak_held == (gpipe ? 4 : kStages - s));
    }
    CHECK(held == whole->named_parameters().size() + 1);  // wte on the first and the last stage
  }
}

TEST_CASE("pipeline: which stage holds which parameter", "[parallel]") {
  const StageLayers first{0, 2, true, false, 0}, middle{2, 4, false, false, 0}, last{4, 6, false, true, 0};
  CHECK(stage_holds("transformer.wte.weight", first, true));
  CHECK(stage_holds("transformer.wte.weight", last, true));  // the head's tied copy
  CHECK_FALSE(stage_holds("transformer.wte.weight", last, false));
  CHECK_FALSE(stage_holds("transformer.wte.weight", middle, true));
  CHECK(stage_holds("transformer.wpe.weight", first, true));
  CHECK(stage_holds("transformer.h.1.mlp.c_fc.weight", first, true));
  CHECK_FALSE(stage_holds("transformer.h.2.mlp.c_fc.weight", first, true));
  CHECK(stage_holds("transformer.h.3.ln_1.bias", middle, true));
  CHECK(stage_holds("transformer.h.5.attn.c_attn.weight", last, true));
  CHECK(stage_holds("transformer.ln_f.weight", last, true));
  CHECK(stage_holds("lm_head.weight", last, false));
  CHECK_FALSE(stage_holds("transformer.ln_f.weight", middle, true));
}

TEST_CASE("pipeline: the forward-only evaluation gives one process's loss on the last stage", "[parallel]") {
  at::set_num_threads(1);
  const auto batches = micro_batches();
  Gpt whole = make_model();
  const double ref = evaluate(whole, batches) * static_cast<double>(total_targets(batches));
  std::vector<double> sums(kStages);
  std::vector<char> training_after(kStages, 0);  // asserted here: Catch's assertions are not thread-safe
  test::run_thread_ranks(kStages, [&](int rank, Communicator& world) {
    auto pp = test::whole_group(world, "pp");
    Gpt model = make_model();
    const StageLayers stage = split_stages(model->cfg, kStages)[static_cast<size_t>(rank)];
    keep_stage(model, stage);
    sums[static_cast<size_t>(rank)] = pipeline_eval_loss_sum(model, *pp, batches, stage, nullptr);
    training_after[static_cast<size_t>(rank)] = model->is_training();
  });
  for (int rank = 0; rank < kStages; ++rank) {
    INFO("rank " << rank);
    CHECK(training_after[static_cast<size_t>(rank)]);  // put back in training mode as it was
  }
  CHECK(sums.back() == Approx(ref).epsilon(1e-6));
  CHECK(sums[0] == 0);
}

TEST_CASE("pipeline: parallel.pp_microbatches re-cuts a step's sequences in order", "[parallel]") {
  const auto micro = micro_batches();  // 4 x 2 sequences
  const auto parts = split_micro_batches(micro, 2);
  REQUIRE(parts.size() == 2);
  CHECK(parts[0].input.size(0) == 4);
  CHECK(torch::equal(parts[1].input, torch::cat({micro[2].input, micro[3].input})));
  CHECK(torch::equal(parts[0].target, torch::cat({micro[0].target, micro[1].target})));
  CHECK(parts[0].target_count + parts[1].target_count == total_targets(micro));
  CHECK(parts[0].target_count == micro[0].target_count + micro[1].target_count);
  CHECK(split_micro_batches(micro, 8).size() == 8);
  CHECK_THROWS_WITH(split_micro_batches(micro, 3), Catch::Contains("parallel.pp_microbatches (3) must divide the 8"));
}
