// Precision: the fp16 loss scaler skips overflowing steps and recovers,
// stochastic rounding is unbiased, and activation checkpointing gives the
// plain gradients (dropout and autocast included).
#include <catch2/catch.hpp>
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <limits>

#include "model/activation_checkpointing.h"
#include "model/lora.h"
#include "optim/adamw.h"
#include "precision/precision.h"
#include "precision/stochastic_round.h"
#include "test_util.h"
#include "train/train_step.h"

using namespace gputrain;

namespace {

Batch random_batch(int64_t vocab, int64_t B, int64_t T, uint64_t seed) {
  auto g = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto in = at::randint(0, vocab, {B, T}, g, torch::kLong);
  auto tg = at::randint(0, vocab, {B, T}, g, torch::kLong);
  return Batch{in, tg, B * T};
}

// The gradients of one step of a fresh model (seed 5), with `policy` and `precision`.
std::vector<torch::Tensor> step_grads(const ModelSettings& m, CheckpointingPolicy policy, const Precision* precision) {
  torch::manual_seed(5);
  Gpt model(m);
  model->train();
  apply_activation_checkpointing(model, policy, 2);
  model->zero_grad();
  torch::manual_seed(99);  // the dropout masks
  accumulate_gradients(model, {random_batch(m.vocab_size, 3, m.seq_len, 1)}, precision);
  return gputrain::test::gradients_of(*model);
}

}  // namespace

TEST_CASE("fp16 loss scaling: an inf gradient skips the step and backs off, clean steps grow the scale",
          "[precision]") {
  PrecisionSettings ps;
  ps.mode = PrecisionMode::kFp16;
  ps.init_scale = 1024;
  ps.growth_interval = 2;
  Precision precision(ps, torch::kCPU);
  REQUIRE(precision.has_scaler());
  auto w = torch::ones({4}, torch::requires_grad());
  AdamW opt({ParamGroup{"g", {"w"}, {w}, 0.0, 1.0}}, AdamWOptions{});
  auto run_step = [&](bool inject_inf) {
    auto loss = (w * w).sum();
    precision.for_backward(loss).backward();
    if (inject_inf) w.mutable_grad()[1] = std::numeric_limits<float>::infinity();
    const bool skip = precision.unscale_and_check({w});
    if (!skip) opt.step(0.1);
    precision.update(skip);
    opt.zero_grad();
    return skip;
  };
  // The gradient arrives scaled and is unscaled exactly before the optimizer sees it.
  auto loss = (w * w).sum();
  precision.for_backward(loss).backward();
  CHECK(w.grad()[0].item<float>() == 2.0f * 1024);
  CHECK_FALSE(precision.unscale_and_check({w}));
  CHECK(w.grad()[0].item<float>() == 2.0f);
  opt.zero_grad();

  const auto before = w.detach().clone();
  CHECK(run_step(true));
  CHECK(torch::equal(w.detach(), before));  // the weights did not move
  CHECK(precision.loss_scale() == 512);     // backed off by 0.5
  CHECK(precision.skipped_steps() == 1);
  CHECK_FALSE(run_step(false));
  CHECK_FALSE(torch::equal(w.detach(), before));  // training goes on
  CHECK(precision.loss_scale() == 512);
  CHECK_FALSE(run_step(false));
  CHECK(precision.loss_scale() == 1024);  // grew after growth_interval clean steps
  // A fixed scale never changes, but still skips.
  ps.loss_scale = 128;
  Precision fixed(ps, torch::kCPU);
  auto v = torch::ones({2}, torch::requires_grad());
  fixed.for_backward((v * v).sum()).backward();
  v.mutable_grad()[0] = std::numeric_limits<float>::quiet_NaN();
  CHECK(fixed.unscale_and_check({v}));
  fixed.update(true);
  CHECK(fixed.loss_scale() == 128);
}

TEST_CASE("stochastic rounding to bf16 is unbiased and exact on representable values", "[precision]") {
  const float x = 1.0f + 1.0f / 512;  // between bf16 neighbours 1 and 1 + 1/128, a quarter of the way up
  auto src = torch::full({200000}, x);
  auto dst = torch::empty({200000}, torch::kBFloat16);
  stochastic_round_to_bf16(src, dst);
  auto up = (dst.to(torch::kFloat) > 1.0f).to(torch::kDouble).mean().item<double>();
  CHECK(up == Approx(0.25).margin(0.01));
  CHECK(dst.to(torch::kDouble).mean().item<double>() == Approx(x).epsilon(1e-4));
  auto exact = torch::tensor({1.5f, -2.0f, 0.0f, std::numeric_limits<float>::infinity()});
  auto out = torch::empty({4}, torch::kBFloat16);
  stochastic_round_to_bf16(exact, out);
  CHECK(torch::equal(out.to(torch::kFloat), exact));
}

TEST_CASE("activation checkpointing gives the plain gradients, dropout included", "[precision][checkpointing]") {
  ModelSettings m = gputrain::test::model_settings(64, 16, 4, 2, 32);
  m.dropout = 0.1;
  const auto plain = step_grads(m, CheckpointingPolicy::kNone, nullptr);
  for (auto policy : {CheckpointingPolicy::kFull, CheckpointingPolicy::kSelective}) {
    const auto ckpt = step_grads(m, policy, nullptr);
    REQUIRE(ckpt.size() == plain.size());
    for (size_t i = 0; i < plain.size(); ++i) {
      INFO("parameter " << i);
      // Same ops on the same values: equal up to float summation order.
      CHECK(torch::allclose(ckpt[i], plain[i], 1e-5, 1e-7));
    }
  }
  // A different dropout mask would change the gradients: the check above can fail.
  torch::manual_seed(5);
  Gpt model(m);
  model->zero_grad();
  torch::manual_seed(100);
  accumulate_gradients(model, {random_batch(m.vocab_size, 3, m.seq_len, 1)});
  CHECK_FALSE(torch::allclose(gputrain::test::gradients_of(*model)[4], plain[4], 1e-5, 1e-7));
}

TEST_CASE("activation checkpointing replays the LoRA adapters' dropout", "[precision][checkpointing]") {
  // model.dropout 0: the adapters' input dropout is the block's only random draw.
  const ModelSettings m = gputrain::test::model_settings(64, 16, 2, 2, 32);
  LoraSettings lora;
  lora.rank = 4;
  lora.dropout = 0.3;
  auto adapter_grads = [&](CheckpointingPolicy policy, uint64_t mask_seed) {
    torch::manual_seed(5);
    Gpt model(m);
    add_lora_adapters(*model, lora);
    {
      torch::NoGradGuard no_grad;  // B starts at zero, which would hide A's mask
      for (auto& p : model->parameters())
        if (p.requires_grad()) p.normal_(0.0, 0.1);
    }
    model->train();
    apply_activation_checkpointing(model, policy, 1);
    torch::manual_seed(mask_seed);
    accumulate_gradients(model, {random_batch(m.vocab_size, 3, m.seq_len, 1)});
    std::vector<torch::Tensor> g;
    for (const auto& p : model->parameters())
      if (p.grad().defined()) g.push_back(p.grad().clone());
    return g;
  };
  const auto plain = adapter_grads(CheckpointingPolicy::kNone, 99);
  const auto ckpt = adapter_grads(CheckpointingPolicy::kFull, 99);
  REQUIRE(!plain.empty());
  REQUIRE(ckpt.size() == plain.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    INFO("trainable parameter " << i);
    CHECK(torch::allclose(ckpt[i], plain[i], 1e-5, 1e-7));
  }
  // Other masks give other gradients: the comparison above can fail.
  const auto other = adapter_grads(CheckpointingPolicy::kNone, 100);
  bool differs = false;
  for (size_t i = 0; i < plain.size(); ++i) differs = differs || !torch::allclose(other[i], plain[i], 1e-5, 1e-7);
  CHECK(differs);
}

TEST_CASE("activation checkpointing replays autocast: bf16 gradients match", "[precision][checkpointing]") {
  ModelSettings m = gputrain::test::model_settings(64, 16, 2, 2, 32);
  PrecisionSettings ps;
  ps.mode = PrecisionMode::kBf16;
  Precision bf16(ps, torch::kCPU);
  const auto plain = step_grads(m, CheckpointingPolicy::kNone, &bf16);
  const auto ckpt = step_grads(m, CheckpointingPolicy::kFull, &bf16);
  for (size_t i = 0; i < plain.size(); ++i) {
    INFO("parameter " << i);
    CHECK(torch::allclose(ckpt[i], plain[i], 1e-3, 1e-5));
  }
  // ... and bf16 gradients are not fp32's (autocast really was on in both).
  const auto fp32 = step_grads(m, CheckpointingPolicy::kNone, nullptr);
  CHECK_FALSE(torch::equal(fp32[4], plain[4]));
}

TEST_CASE("math attention equals SDPA", "[precision]") {
  ModelSettings m = gputrain::test::model_settings(64, 16, 2, 4, 32);
  torch::manual_seed(1);
  Gpt sdpa(m);
  m.attention = AttentionImpl::kMath;
  torch::manual_seed(1);
  Gpt math(m);
  auto b = random_batch(64, 2, 16, 3);
  CHECK(sdpa->loss_sum(b.input, b.target).item<double>() ==
        Approx(math->loss_sum(b.input, b.target).item<double>()).epsilon(1e-5));
}

TEST_CASE("pad_vocab_to_multiple_of rounds the embedding rows up", "[precision]") {
  ModelSettings m = gputrain::test::model_settings(50257, 8, 1, 1, 8);
  m.pad_vocab_to_multiple_of = 64;
  CHECK(m.padded_vocab() == 50304);
  Gpt model(m);
  CHECK(model->transformer->wte->weight.size(0) == 50304);
  m.pad_vocab_to_multiple_of = 0;
  CHECK(m.padded_vocab() == 50257);
}
