// AdamW against torch::optim::AdamW, weight-decay groups, the LR schedule's
// values, and global-norm clipping.
#include <catch2/catch.hpp>
#include <ATen/ATen.h>
#include <torch/optim/adamw.h>

#include <cmath>
#include <numbers>

#include "model/gpt.h"
#include "optim/adamw.h"
#include "optim/grad_clip.h"
#include "optim/lr_schedule.h"
#include "test_util.h"

using namespace gputrain;

TEST_CASE("AdamW matches torch::optim::AdamW over several steps", "[optim]") {
  torch::manual_seed(4);
  std::vector<torch::Tensor> ours, theirs;
  for (auto shape : {std::vector<int64_t>{5, 7}, std::vector<int64_t>{7}, std::vector<int64_t>{3, 2, 4}}) {
    auto t = torch::randn(shape);
    ours.push_back(t.clone().requires_grad_(true));
    theirs.push_back(t.clone().requires_grad_(true));
  }
  const double lr = 1e-2, wd = 0.1;
  ParamGroup decay{"decay", {"a", "c"}, {ours[0], ours[2]}, wd, 1.0};
  ParamGroup no_decay{"no_decay", {"b"}, {ours[1]}, 0.0, 1.0};
  AdamW fused({decay, no_decay}, AdamWOptions{0.9, 0.95, 1e-8}, UpdateKernel::kFused);
  std::vector<torch::Tensor> foreach_params;
  for (const auto& t : ours) foreach_params.push_back(t.detach().clone());
  AdamW foreach ({ParamGroup{"decay", {"a", "c"}, {foreach_params[0], foreach_params[2]}, wd, 1.0},
                  ParamGroup{"no_decay", {"b"}, {foreach_params[1]}, 0.0, 1.0}},
                 AdamWOptions{0.9, 0.95, 1e-8}, UpdateKernel::kForeach);

  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{theirs[0], theirs[2]},
                      std::make_unique<torch::optim::AdamWOptions>(
                          torch::optim::AdamWOptions(lr).betas({0.9, 0.95}).eps(1e-8).weight_decay(wd)));
  groups.emplace_back(std::vector<torch::Tensor>{theirs[1]},
                      std::make_unique<torch::optim::AdamWOptions>(
                          torch::optim::AdamWOptions(lr).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.0)));
  torch::optim::AdamW ref(groups, torch::optim::AdamWOptions(lr));

  for (int step = 0; step < 6; ++step) {
    for (size_t i = 0; i < ours.size(); ++i) {
      auto g = torch::randn(ours[i].sizes());
      ours[i].mutable_grad() = g.clone();
      theirs[i].mutable_grad() = g.clone();
      foreach_params[i].mutable_grad() = g.clone();
    }
    fused.step(lr);
    foreach
      .step(lr);
    ref.step();
  }
  for (size_t i = 0; i < ours.size(); ++i) {
    INFO("tensor " << i);
    // float32 arithmetic in different orders: agree to ~1e-6 relative.
    CHECK(torch::allclose(ours[i], theirs[i], 1e-5, 1e-6));
    CHECK(torch::allclose(foreach_params[i], theirs[i], 1e-5, 1e-6));
  }
  CHECK(fused.state_bytes() == 2 * 4 * (35 + 7 + 24) + 3 * 8);  // moments + int64 step counters
}

TEST_CASE("AdamW skips parameters without gradients", "[optim]") {
  auto a = torch::ones({3}).requires_grad_(true);
  for (UpdateKernel k : {UpdateKernel::kFused, UpdateKernel::kForeach}) {
    AdamW opt({ParamGroup{"g", {"a"}, {a}, 0.5, 1.0}}, {}, k);
    opt.step(0.1);
    CHECK(torch::equal(a, torch::ones({3})));
    CHECK(opt.state().front().tensor.item<int64_t>() == 0);  // its step count did not advance
  }
}

TEST_CASE("weight decay groups: matrices decay, biases, norms and embeddings do not", "[optim]") {
  Gpt model(gputrain::test::model_settings(16, 4, 1, 1, 8));
  OptimSettings o;
  auto groups = make_param_groups(*model, o);
  REQUIRE(groups.size() == 2);
  const auto& decay = groups[0].names;
  const auto& no_decay = groups[1].names;
  auto has = [](const std::vector<std::string>& v, const std::string& n) {
    return std::find(v.begin(), v.end(), n) != v.end();
  };
  CHECK(groups[0].weight_decay == Approx(0.1));
  CHECK(groups[1].weight_decay == 0.0);
  CHECK(has(decay, "transformer.h.0.attn.c_attn.weight"));
  CHECK(has(decay, "transformer.h.0.mlp.c_proj.weight"));
  CHECK(has(no_decay, "transformer.h.0.attn.c_attn.bias"));
  CHECK(has(no_decay, "transformer.h.0.ln_1.weight"));
  CHECK(has(no_decay, "transformer.wte.weight"));
  CHECK(has(no_decay, "transformer.wpe.weight"));
  CHECK(decay.size() + no_decay.size() == model->parameters().size());

  o.decay_embeddings = true;
  CHECK(has(make_param_groups(*model, o)[0].names, "transformer.wte.weight"));
}

TEST_CASE("LR schedule: warmup, cosine, linear, constant", "[optim]") {
  OptimSettings o;
  o.lr = 1.0;
  o.schedule.warmup_steps = 10;
  o.schedule.min_lr_ratio = 0.1;
  o.schedule.name = ScheduleName::kCosine;
  LrSchedule cosine(o, 110);
  CHECK(cosine.at(0) == Approx(0.1));  // (0 + 1) / 10
  CHECK(cosine.at(9) == Approx(1.0));
  CHECK(cosine.at(10) == Approx(1.0));   // decay starts
  CHECK(cosine.at(60) == Approx(0.55));  // halfway: 0.1 + 0.9 * 0.5
  CHECK(cosine.at(35) == Approx(0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi * 0.25))));
  CHECK(cosine.at(110) == Approx(0.1));
  CHECK(cosine.at(500) == Approx(0.1));

  o.schedule.name = ScheduleName::kLinear;
  LrSchedule linear(o, 110);
  CHECK(linear.at(60) == Approx(0.55));
  CHECK(linear.at(85) == Approx(0.1 + 0.9 * 0.25));

  o.schedule.name = ScheduleName::kConstant;
  LrSchedule constant(o, 110);
  CHECK(constant.at(5) == Approx(0.6));
  CHECK(constant.at(100) == Approx(1.0));

  o.schedule.name = ScheduleName::kCosine;
  o.schedule.decay_steps = 60;  // decay ends early, then flat
  LrSchedule early(o, 110);
  CHECK(early.at(35) == Approx(0.55));
  CHECK(early.at(80) == Approx(0.1));
}

TEST_CASE("global-norm clipping scales all gradients together", "[optim]") {
  auto a = torch::zeros({2}).requires_grad_(true);
  auto b = torch::zeros({1}).requires_grad_(true);
  a.mutable_grad() = torch::tensor({3.0f, 0.0f});
  b.mutable_grad() = torch::tensor({4.0f});
  auto norm = clip_grad_norm({a, b}, 1.0).item<double>();
  CHECK(norm == Approx(5.0));
  CHECK(a.grad()[0].item<double>() == Approx(0.6).epsilon(1e-5));
  CHECK(b.grad()[0].item<double>() == Approx(0.8).epsilon(1e-5));

  a.mutable_grad() = torch::tensor({0.3f, 0.0f});
  b.mutable_grad() = torch::tensor({0.4f});
  CHECK(clip_grad_norm({a, b}, 1.0).item<double>() == Approx(0.5));
  CHECK(a.grad()[0].item<double>() == Approx(0.3).epsilon(1e-5));    // under the limit: unchanged
  CHECK(clip_grad_norm({a, b}, 0.0).item<double>() == Approx(0.5));  // 0 = measure only
}

TEST_CASE("fused AdamW falls back to foreach for a non-contiguous parameter", "[optim]") {
  auto t = torch::randn({4, 3}).t();  // a transposed leaf: strides (1, 3)
  REQUIRE_FALSE(t.is_contiguous());
  auto ref = t.contiguous().clone();
  AdamW opt({ParamGroup{"g", {"t"}, {t}, 0.0, 1.0}}, {}, UpdateKernel::kFused);
  CHECK_THAT(opt.describe(), Catch::Contains("foreach"));
  AdamW dense({ParamGroup{"g", {"r"}, {ref}, 0.0, 1.0}}, {}, UpdateKernel::kFused);
  auto g = torch::randn({3, 4});
  t.mutable_grad() = g.clone();
  ref.mutable_grad() = g.clone();
  opt.step(0.1);
  dense.step(0.1);
  CHECK(torch::allclose(t, ref, 1e-6, 1e-7));
}

TEST_CASE("fused AdamW folds the clipping coefficient into its pass: the same update as clipping first", "[optim]") {
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    INFO(dtype);
    torch::manual_seed(11);
    auto w = torch::randn({300, 70}).to(dtype), b = torch::randn({70}).to(dtype);
    auto g_w = (torch::randn({300, 70}) * 3).to(dtype), g_b = (torch::randn({70}) * 3).to(dtype);
    auto run = [&](bool fold) {
      std::vector<torch::Tensor> params = {w.clone().requires_grad_(true), b.clone().requires_grad_(true)};
      AdamW opt({ParamGroup{"g", {"w", "b"}, params, 0.1, 1.0}}, {}, UpdateKernel::kFused);
      REQUIRE(opt.folds_grad_scale());
      for (int step = 0; step < 3; ++step) {
        params[0].mutable_grad() = g_w * (step + 1);
        params[1].mutable_grad() = g_b * (step + 1);
        torch::Tensor coef;
        const double norm = clip_grad_norm(params, 1.0, fold ? &coef : nullptr).item<double>();
        CHECK(norm > 1.0);  // clipping is active
        CHECK(coef.defined() == fold);
        opt.set_grad_scale(coef);
        opt.step(1e-2);
      }
      return params;
    };
    auto folded = run(true), clipped = run(false);
    if (dtype == torch::kFloat) {  // g * coef rounded once either way: the same bits
      CHECK(torch::equal(folded[0], clipped[0]));
      CHECK(torch::equal(folded[1], clipped[1]));
    } else {  // clipping first rounds the scaled bf16 gradient; folding does not
      CHECK(torch::allclose(folded[0].to(torch::kFloat), clipped[0].to(torch::kFloat), 1e-2, 1e-2));
    }
  }
  // Foreach updates do not fold: the trainer scales their gradients first.
  auto p = torch::zeros({2}).requires_grad_(true);
  AdamW foreach_opt({ParamGroup{"g", {"p"}, {p}, 0.0, 1.0}}, {}, UpdateKernel::kForeach);
  CHECK_FALSE(foreach_opt.folds_grad_scale());
}
