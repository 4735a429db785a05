// bf16 mixed precision's weight copies (train/weight_copies.h): training
// with them gives autocast's numbers bit for bit, the optimizer keeps them
// equal to the weights rounded to nearest, the products really read them,
// and they are made only where that holds.
#include <catch2/catch.hpp>
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "model/linear.h"
#include "optim/make_optimizer.h"
#include "optim/param_groups.h"
#include "test_util.h"
#include "train/train_step.h"
#include "train/weight_copies.h"

using namespace gputrain;

namespace {

struct Trained {
  Gpt model{nullptr};
  std::vector<double> losses;
  WeightCopies copies;
};

// 6 AdamW steps of 2 micro-batches (bf16 autocast on the CPU), with or without weight copies.
Trained train(const ModelSettings& m, const OptimSettings& o, PrecisionMode mode, bool copies) {
  PrecisionSettings ps;
  ps.mode = mode;
  const Precision precision(ps, torch::kCPU);
  torch::manual_seed(3);
  Trained t{Gpt(m)};
  auto optimizer = make_optimizer(make_param_groups(*t.model, o), o);
  if (copies) t.copies = attach_weight_copies(t.model, *optimizer, precision);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  for (int step = 0; step < 6; ++step) {
    std::vector<Batch> micro;
    for (int i = 0; i < 2; ++i) {
      // Counting from a random start: learnable, so the loss falls within the 6 steps.
      auto start = at::randint(0, m.vocab_size, {3, 1}, gen, torch::kLong);
      auto tokens = (start + at::arange(m.seq_len + 1, torch::kLong)).remainder(m.vocab_size);
      micro.push_back(Batch{tokens.slice(1, 0, -1), tokens.slice(1, 1), 3 * m.seq_len});
    }
    t.losses.push_back(accumulate_gradients(t.model, micro, &precision).item<double>());
    optimizer->step(1e-2);
    optimizer->zero_grad();
  }
  return t;
}

std::vector<LinearImpl*> linears(Gpt& model) {
  std::vector<LinearImpl*> out;
  for (const auto& m : model->modules(false))
    if (auto* l = dynamic_cast<LinearImpl*>(m.get())) out.push_back(l);
  return out;
}

}  // namespace

TEST_CASE("bf16 weight copies: autocast's numbers bit for bit, kept equal to the rounded weights",
          "[train][precision]") {
  const ModelSettings m = gputrain::test::model_settings(64, 16, 2, 2, 32);
  OptimSettings o;  // adamw; impl auto = the fused update (a C++ loop on the CPU)
  const Trained plain = train(m, o, PrecisionMode::kBf16, false);
  Trained with = train(m, o, PrecisionMode::kBf16, true);

  // Every Linear weight and the tied head: 4 per block, 2 blocks, + wte.
  std::vector<LinearImpl*> layers = linears(with.model);
  REQUIRE(layers.size() == 8);
  CHECK(with.copies.tensors == 9);
  int64_t bytes = 2 * with.model->transformer->wte->weight.numel();
  for (auto* l : layers) bytes += 2 * l->weight.numel();
  CHECK(with.copies.bytes == bytes);

  CHECK(with.losses == plain.losses);
  CHECK(with.losses.back() < with.losses.front());
  const auto a = plain.model->named_parameters(), b = with.model->named_parameters();
  for (const auto& p : a) {
    INFO(p.key());
    CHECK(torch::equal(p.value(), b[p.key()]));
  }
  for (auto* l : layers) CHECK(torch::equal(l->weight_copy, l->weight.to(torch::kBFloat16)));
  CHECK(torch::equal(with.model->head_weight_copy, with.model->transformer->wte->weight.to(torch::kBFloat16)));

  // The products read the copies: changing one changes the loss under autocast, and not without it.
  auto tokens = torch::randint(0, m.vocab_size, {2, m.seq_len}, torch::kLong);
  auto loss = [&](bool autocast) {
    torch::NoGradGuard no_grad;
    AutocastGuard guard(autocast, c10::DeviceType::CPU, c10::kBFloat16);
    return with.model->loss_sum(tokens, tokens).item<double>();
  };
  const double before = loss(true), fp32 = loss(false);
  layers.front()->weight_copy.mul_(0.5);
  CHECK(loss(true) != before);
  CHECK(loss(false) == fp32);
}

TEST_CASE("bf16 weight copies are made only for bf16 autocast and an optimizer that writes them",
          "[train][precision]") {
  const ModelSettings m = gputrain::test::model_settings(64, 16, 1, 2, 32);
  auto made = [&](const OptimSettings& o, PrecisionMode mode, bool runs_head = true) {
    PrecisionSettings ps;
    ps.mode = mode;
    Gpt model(m);
    auto optimizer = make_optimizer(make_param_groups(*model, o), o);
    const WeightCopies c = attach_weight_copies(model, *optimizer, Precision(ps, torch::kCPU), runs_head);
    CHECK(model->head_weight_copy.defined() == (c.tensors > 0 && runs_head));
    int64_t set = model->head_weight_copy.defined() ? 1 : 0;
    for (auto* l : linears(model)) set += l->weight_copy.defined() ? 1 : 0;
    CHECK(set == c.tensors);
    return c.tensors;
  };
  OptimSettings fused;
  OptimSettings foreach = fused;
  foreach
    .impl = OptimImpl::kForeach;
  OptimSettings lion = fused;
  lion.name = OptimName::kLion;
  CHECK(made(fused, PrecisionMode::kBf16) == 5);
  // A pipeline stage that does not compute the head keeps no copy of the tied embedding for it.
  CHECK(made(fused, PrecisionMode::kBf16, /*runs_head=*/false) == 4);
  CHECK(made(foreach, PrecisionMode::kBf16) == 0);
  CHECK(made(lion, PrecisionMode::kBf16) == 0);
  for (PrecisionMode mode :
       {PrecisionMode::kFp32, PrecisionMode::kTf32, PrecisionMode::kFp16, PrecisionMode::kBf16Pure})
    CHECK(made(fused, mode) == 0);
}
