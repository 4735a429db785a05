// parallel.offload_optimizer's copies: an update through them equals an update in place; the placement
// that reads the offload keys, and the optimizer it builds over host copies.
#include <catch2/catch.hpp>

#include <ATen/CPUGeneratorImpl.h>

#include <functional>

#include "config/settings.h"
#include "model/gpt.h"
#include "optim/cpu_offload.h"
#include "optim/make_optimizer.h"
#include "optim/param_groups.h"
#include "test_util.h"

using namespace gputrain;

namespace {

void copy_weights(Gpt& from, Gpt& to) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < from->parameters().size(); ++i) to->parameters()[i].copy_(from->parameters()[i]);
}

// One step of both models on the same tokens: `direct` in place, `offloaded` by `step_offloaded`.
void step_both(Gpt& direct, Optimizer& plain, Gpt& offloaded, const std::function<void()>& step_offloaded,
               uint64_t seed, double lr) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto tokens = torch::randint(0, 64, {2, 8}, gen, torch::kLong);
  for (auto* model : {&direct, &offloaded}) (*model)->loss_sum(tokens, tokens).backward();
  plain.step(lr);
  step_offloaded();
  plain.zero_grad();
  for (auto& p : offloaded->parameters()) p.mutable_grad() = torch::Tensor();
}

// ... through the host copies of `offload`, updated by `via_copies`.
void step_both(Gpt& direct, Optimizer& plain, Gpt& offloaded, CpuOffload& offload, Optimizer& via_copies, uint64_t seed,
               double lr) {
  step_both(
      direct, plain, offloaded,
      [&] {
        offload.gradients_to_host();
        via_copies.step(lr);
        offload.parameters_to_device();
      },
      seed, lr);
}

}  // namespace

TEST_CASE("cpu offload: steps through the host copies equal steps in place", "[optim]") {
  OptimSettings o;
  o.lr = 1e-2;
  ModelSettings m = test::model_settings(64, 8, 1, 2, 16);
  torch::manual_seed(3);
  Gpt direct(m), offloaded(m);
  copy_weights(direct, offloaded);

  auto plain = make_optimizer(make_param_groups(*direct, o), o);
  CpuOffload offload(make_param_groups(*offloaded, o));
  // The copies are separate memory with the same names.
  REQUIRE(offload.cpu_groups().front().params.front().data_ptr() !=
          make_param_groups(*offloaded, o).front().params.front().data_ptr());
  auto via_copies = make_optimizer(offload.cpu_groups(), o);

  for (int step = 0; step < 3; ++step) step_both(direct, *plain, offloaded, offload, *via_copies, step, o.lr);
  for (size_t i = 0; i < direct->parameters().size(); ++i)
    CHECK(torch::equal(direct->parameters()[i], offloaded->parameters()[i]));
  CHECK(offload.host_bytes() > 0);
}

TEST_CASE("cpu offload: weights loaded in place reach the host copies before the next update", "[optim]") {
  OptimSettings o;
  o.lr = 1e-2;
  ModelSettings m = test::model_settings(64, 8, 1, 2, 16);
  torch::manual_seed(4);
  Gpt direct(m), offloaded(m);
  CpuOffload offload(make_param_groups(*offloaded, o));
  auto plain = make_optimizer(make_param_groups(*direct, o), o);
  auto via_copies = make_optimizer(offload.cpu_groups(), o);
  // A checkpoint loaded into the device parameters (resume, spike rollback): both models get direct's weights.
  copy_weights(direct, offloaded);
  offload.parameters_to_host();
  step_both(direct, *plain, offloaded, offload, *via_copies, 5, o.lr);
  // Without parameters_to_host the update would start from the copies' old weights and write those back.
  for (size_t i = 0; i < direct->parameters().size(); ++i)
    CHECK(torch::equal(direct->parameters()[i], offloaded->parameters()[i]));
}

TEST_CASE("cpu offload: the optimizer its placement builds steps as in place, with the same state", "[optim]") {
  OptimSettings o;
  o.lr = 1e-2;
  ModelSettings m = test::model_settings(64, 8, 1, 2, 16);
  torch::manual_seed(6);
  Gpt direct(m), offloaded(m);
  auto plain = make_optimizer(make_param_groups(*direct, o), o);
  OptimizerPlacement host;
  host.state = OptimizerPlacement::State::kHost;
  auto wrapped = make_optimizer(make_param_groups(*offloaded, o), o, std::nullopt, std::nullopt, host);
  CHECK_FALSE(wrapped->folds_grad_scale());
  CHECK_THAT(wrapped->placement(), Catch::Matchers::Contains("pinned host memory"));
  CHECK(wrapped->describe() == plain->describe());  // checkpoints record the same optimizer
  // A checkpoint's state names and shapes are the in-memory optimizer's.
  REQUIRE(wrapped->state().size() == plain->state().size());
  for (size_t i = 0; i < plain->state().size(); ++i) {
    CHECK(wrapped->state()[i].name == plain->state()[i].name);
    CHECK(wrapped->state()[i].tensor.sizes() == plain->state()[i].tensor.sizes());
  }
  // Weights loaded in place, then announced: the host copies follow before the update.
  copy_weights(direct, offloaded);
  wrapped->parameters_changed();
  for (uint64_t step = 0; step < 3; ++step)
    step_both(
        direct, *plain, offloaded, [&] { wrapped->step(o.lr); }, step, o.lr);
  for (size_t i = 0; i < direct->parameters().size(); ++i)
    CHECK(torch::equal(direct->parameters()[i], offloaded->parameters()[i]));
  CHECK(torch::equal(wrapped->state().back().tensor, plain->state().back().tensor));
}

TEST_CASE("optimizer placement: parallel.offload_* read once for the device", "[optim]") {
  ParallelSettings p;
  p.offload_optimizer = OptimizerOffload::kCpu;
  CHECK(optimizer_placement(p, torch::Device(torch::kCUDA, 0), "out", false).state == OptimizerPlacement::State::kHost);
  const OptimizerPlacement cpu = optimizer_placement(p, torch::kCPU, "out", false);
  CHECK(cpu.state == OptimizerPlacement::State::kMemory);
  REQUIRE(cpu.notices.size() == 1);
  CHECK_THAT(cpu.notices[0], Catch::Matchers::Contains("parallel.offload_optimizer has no effect on the CPU"));
  CHECK(optimizer_placement(p, torch::kCPU, "out", /*device_named_cpu=*/true).notices.empty());  // validate warns
  p.offload_optimizer = OptimizerOffload::kNvme;
  const OptimizerPlacement file = optimizer_placement(p, torch::Device(torch::kCUDA, 0), "out", false);
  CHECK(file.state == OptimizerPlacement::State::kFile);
  CHECK(file.file_dir == "out");
  CHECK(file.shards_on_host);
  p.offload_dir = "/scratch";
  CHECK(optimizer_placement(p, torch::kCPU, "out", false).file_dir == "/scratch");
  CHECK_FALSE(optimizer_placement(p, torch::kCPU, "out", false).shards_on_host);
}
