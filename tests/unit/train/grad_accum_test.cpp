// Gradient accumulation: k micro-batches of b give the same gradients as one
// batch of k*b, also when micro-batches hold different numbers of targets
// (the loss is normalized by the step's total target count).
#include <catch2/catch.hpp>
#include <ATen/ATen.h>

#include "test_util.h"
#include "train/train_step.h"

using namespace gputrain;

namespace {

Batch make_batch(const torch::Tensor& in, const torch::Tensor& tg) {
  return Batch{in, tg, (tg != kIgnoreIndex).sum().item<int64_t>()};
}

}  // namespace

TEST_CASE("4 micro-batches of 2 give the gradients of one batch of 8", "[train]") {
  ModelSettings m = gputrain::test::model_settings(50, 12, 2, 2, 16);
  torch::manual_seed(3);
  Gpt model(m);
  model->to(torch::kDouble);  // compare the math, not float32 summation order

  auto inputs = torch::randint(0, 50, {8, 12}, torch::kLong);
  auto targets = torch::randint(0, 50, {8, 12}, torch::kLong);
  // Unequal masking: micro-batch 0 loses 10 targets, the others none. A
  // per-micro-batch mean would weight its tokens differently.
  targets.slice(0, 0, 2).slice(1, 0, 5) = kIgnoreIndex;

  model->zero_grad();
  auto full_loss = accumulate_gradients(model, {make_batch(inputs, targets)}).item<double>();
  auto full = gputrain::test::gradients_of(*model);

  model->zero_grad();
  std::vector<Batch> micro;
  for (int i = 0; i < 4; ++i)
    micro.push_back(make_batch(inputs.slice(0, 2 * i, 2 * i + 2), targets.slice(0, 2 * i, 2 * i + 2)));
  auto accum_loss = accumulate_gradients(model, micro).item<double>();
  auto accum = gputrain::test::gradients_of(*model);

  CHECK(accum_loss == Approx(full_loss).epsilon(1e-12));
  for (size_t i = 0; i < full.size(); ++i) {
    INFO("parameter " << i);
    CHECK(torch::allclose(accum[i], full[i], 1e-10, 1e-12));
  }

  // And the loss is the mean over the 86 counted targets, not over 96.
  auto ref = model->loss_sum(inputs, targets).item<double>() / 86.0;
  CHECK(full_loss == Approx(ref).epsilon(1e-12));
}

TEST_CASE("a step whose targets are all masked (chat prompts) adds zero loss and zero gradients", "[train]") {
  Gpt model(gputrain::test::model_settings(10, 4, 1, 1, 8));
  auto in = torch::zeros({1, 4}, torch::kLong);
  auto tg = torch::full({1, 4}, kIgnoreIndex, torch::kLong);
  const torch::Tensor loss = accumulate_gradients(model, {make_batch(in, tg)});
  CHECK(loss.item<double>() == 0.0);
  for (const auto& p : model->parameters())
    if (p.grad().defined()) CHECK(p.grad().abs().max().item<double>() == 0.0);
}

// A captured CUDA graph (train/step_graph.h) reads the normalizer from a
// device scalar instead of a constant: the same gradients and loss, to the bit.
TEST_CASE("the normalizer as a tensor gives the host normalizer's gradients and loss", "[train]") {
  torch::manual_seed(5);
  Gpt model(gputrain::test::model_settings(50, 12, 2, 2, 16));
  auto inputs = torch::randint(0, 50, {4, 12}, torch::kLong);
  auto targets = torch::randint(0, 50, {4, 12}, torch::kLong);
  targets.slice(0, 0, 1).slice(1, 0, 7) = kIgnoreIndex;
  const std::vector<Batch> micro = {make_batch(inputs.slice(0, 0, 2), targets.slice(0, 0, 2)),
                                    make_batch(inputs.slice(0, 2, 4), targets.slice(0, 2, 4))};
  REQUIRE(inverse_unit_count(default_objective(), micro, 0) == 1.0 / 41.0);
  CHECK(inverse_unit_count(default_objective(), micro, 82) == 1.0 / 82.0);  // data parallel: every rank's count

  model->zero_grad();
  const auto host_loss = accumulate_gradients(model, micro);
  const auto host = gputrain::test::gradients_of(*model);
  model->zero_grad();
  AccumulateOptions o;
  o.inv_total = torch::full({}, 1.0 / 41.0, torch::kFloat);
  o.total_targets = 7;  // ignored: the tensor decides
  const auto tensor_loss = accumulate_gradients(model, micro, nullptr, o);
  const auto tensor = gputrain::test::gradients_of(*model);
  CHECK(tensor_loss.item<float>() == host_loss.item<float>());
  for (size_t i = 0; i < host.size(); ++i) {
    INFO("parameter " << i);
    CHECK(torch::equal(tensor[i], host[i]));
  }
  // A different value in the tensor scales everything by it.
  model->zero_grad();
  o.inv_total.fill_(2.0 / 41.0);
  CHECK(accumulate_gradients(model, micro, nullptr, o).item<float>() ==
        Approx(2 * host_loss.item<float>()).epsilon(1e-6));
}
