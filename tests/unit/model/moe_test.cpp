// Mixture of experts (model/moe.h): one expert with top_k 1 is the dense
// MLP, routing and capacity on crafted probabilities, the balancing loss's
// value on crafted routings and its gradient into the router, and the shape
// list and active-parameter count against the real module.
#include <catch2/catch.hpp>
#include <ATen/ATen.h>

#include <cmath>

#include "checkpoint/module_weights.h"
#include "model/gpt.h"
#include "model/gpt_shapes.h"
#include "model/moe.h"
#include "test_util.h"

using namespace gputrain;

namespace {

ModelSettings tiny(ModelArch arch, int64_t experts, int64_t top_k) {
  ModelSettings m = test::model_settings(40, 8, 2, 2, 16);
  m.arch = arch;
  m.moe.experts = experts;
  m.moe.top_k = top_k;
  m.moe.every = 1;
  return m;
}

}  // namespace

TEST_CASE("moe: one expert with top_k 1 equals the dense MLP, forward and backward", "[model][moe]") {
  for (ModelArch arch : {ModelArch::kGpt, ModelArch::kLlama}) {
    CAPTURE(static_cast<int>(arch));
    ModelSettings m = tiny(arch, 1, 1);
    m.moe.capacity_factor = 1.0;  // 1 expert x top 1: room for every token
    ModelSettings dense_settings = m;
    dense_settings.moe.experts = 0;
    torch::manual_seed(5);
    Gpt dense(dense_settings);
    Gpt moe(m);
    // The dense weights into the mixture: mlp.c_fc -> mlp.experts.0.c_fc; the router's own weight stays.
    std::vector<NamedTensor> weights;
    for (const auto& [name, t] : module_weights(*dense)) {
      std::string n = name;
      if (const auto at = n.find(".mlp."); at != std::string::npos) n.replace(at, 5, ".mlp.experts.0.");
      weights.push_back({n, t});
    }
    load_module_weights(*moe, weights, "dense", "",
                        [](const std::string& n) { return n.find("router") == std::string::npos; });
    const auto tokens = torch::randint(0, 40, {3, 8}, torch::kLong);
    auto a = dense->loss_sum(tokens, tokens), b = moe->loss_sum(tokens, tokens);
    CHECK(a.item<double>() == Approx(b.item<double>()).epsilon(1e-6));
    moe->moe->aux_grad_scale = 0;  // the balancing loss is constant with one expert anyway
    a.backward();
    b.backward();
    const auto d = dense->named_parameters(), e = moe->named_parameters();
    const auto dense_fc = d["transformer.h.1.mlp.c_fc.weight"].grad(),
               moe_fc = e["transformer.h.1.mlp.experts.0.c_fc.weight"].grad();
    CHECK((dense_fc - moe_fc).abs().max().item<double>() <= 1e-6 * dense_fc.abs().max().item<double>());
    CHECK(moe->moe->assigned == 3 * 8 * 2);  // 24 tokens through 2 mixture layers
    CHECK(moe->moe->dropped == 0);
    CHECK(moe->moe->aux_sum == Approx(2.0));  // 1 per layer: one expert is perfectly balanced
  }
}

TEST_CASE("moe: tokens go to their top-k experts, first choices fill capacity first, the rest are dropped",
          "[model][moe]") {
  // 4 tokens, 3 experts. Every token's first choice is expert 0; second choices 1, 1, 2, 2.
  const auto probs = torch::tensor({0.6, 0.3, 0.1, 0.7, 0.2, 0.1, 0.5, 0.1, 0.4, 0.8, 0.05, 0.15}).view({4, 3});
  const Routing unlimited = route_tokens(probs, 2, 0);
  CHECK(unlimited.dropped == 0);
  CHECK(unlimited.token.numel() == 8);
  // capacity ceil(1.0 x 4 x 2 / 3) = 3: expert 0 takes tokens 0, 1, 2 (first choices, token order); token 3's first
  // choice is dropped.
  CHECK(expert_capacity(1.0, 4, 2, 3) == 3);
  const Routing r = route_tokens(probs, 2, 3);
  CHECK(r.dropped == 1);
  std::vector<std::tuple<int64_t, int64_t, double>> kept;
  for (int64_t i = 0; i < r.token.numel(); ++i)
    kept.emplace_back(r.token[i].item<int64_t>(), r.expert[i].item<int64_t>(), r.gate[i].item<double>());
  const std::vector<std::tuple<int64_t, int64_t, double>> expected = {
      {0, 0, 0.6}, {1, 0, 0.7}, {2, 0, 0.5}, {0, 1, 0.3}, {1, 1, 0.2}, {2, 2, 0.4}, {3, 2, 0.15}};
  REQUIRE(kept.size() == expected.size());
  for (size_t i = 0; i < kept.size(); ++i) {
    CHECK(std::get<0>(kept[i]) == std::get<0>(expected[i]));
    CHECK(std::get<1>(kept[i]) == std::get<1>(expected[i]));
    CHECK(std::get<2>(kept[i]) == Approx(std::get<2>(expected[i])));
  }
  CHECK(expert_capacity(0.0, 4, 2, 3) == 0);  // no limit
}

TEST_CASE("moe: the balancing loss is 1 when balanced, experts when collapsed, and exact on a crafted routing",
          "[model][moe]") {
  // Balanced: 4 experts, uniform probabilities, each expert chosen by one of 4 tokens.
  const auto uniform = torch::full({4, 4}, 0.25);
  CHECK(load_balancing_loss(uniform, torch::tensor({0, 1, 2, 3}, torch::kLong).view({4, 1})).item<double>() ==
        Approx(1.0));
  // Collapsed: every token on expert 0 with probability 1.
  auto collapsed = torch::zeros({4, 4});
  collapsed.select(1, 0).fill_(1.0);
  CHECK(load_balancing_loss(collapsed, torch::zeros({4, 1}, torch::kLong)).item<double>() == Approx(4.0));
  // Crafted, top 1 of 2 experts over 2 tokens: f = (1, 0) (both to expert 0), P = (0.7, 0.3):
  // 2 x (1 x 0.7 + 0 x 0.3) = 1.4.
  const auto probs = torch::tensor({0.8, 0.2, 0.6, 0.4}).view({2, 2});
  CHECK(load_balancing_loss(probs, torch::zeros({2, 1}, torch::kLong)).item<double>() == Approx(1.4));
}

TEST_CASE(
    "moe: the balancing loss reaches the router through aux_grad_scale, the reported loss stays the cross-entropy",
    "[model][moe]") {
  ModelSettings m = tiny(ModelArch::kGpt, 4, 2);
  m.moe.capacity_factor = 0;
  m.moe.every = 2;  // block 1 alone: its balancing loss depends on its own router only
  torch::manual_seed(6);
  Gpt model(m);
  const auto tokens = torch::randint(0, 40, {2, 8}, torch::kLong);
  auto router_grad = [&](double scale) {
    model->zero_grad();
    model->moe->aux_grad_scale = scale;
    model->loss_sum(tokens, tokens).backward();
    return model->named_parameters()["transformer.h.1.mlp.router.weight"].grad().clone();
  };
  const auto plain = router_grad(0.0), scaled = router_grad(0.5);
  // The difference is 0.5 x d(balancing loss)/d(router), computed here on its own.
  torch::Tensor expected;
  {
    auto& block = *(*model->transformer->h)[1]->as<Block>();
    auto x = model->run_blocks(model->embed(tokens), 0, 1);
    auto h = x + block.attn(block.ln_1(x));
    auto flat = block.ln_2(h).reshape({-1, m.d_model});
    auto probs = at::softmax(block.moe->router(flat), -1);
    auto [gates, chosen] = probs.topk(2, -1);
    model->zero_grad();
    (0.5 * load_balancing_loss(probs, chosen)).backward();
    expected = model->named_parameters()["transformer.h.1.mlp.router.weight"].grad().clone();
  }
  CHECK((scaled - plain - expected).abs().max().item<double>() < 1e-6);
  CHECK(expected.abs().max().item<double>() > 1e-6);
}

TEST_CASE("moe: shapes and active parameters match the module, experts run even without tokens", "[model][moe]") {
  for (ModelArch arch : {ModelArch::kGpt, ModelArch::kLlama}) {
    ModelSettings m = tiny(arch, 4, 1);
    m.moe.every = 2;  // block 1 only
    Gpt model(m);
    CHECK(test::shape_list_mismatch(m, *model).empty());
    const auto named = model->named_parameters();
    CHECK(named.contains("transformer.h.0.mlp.c_fc.weight"));  // dense
    CHECK(named.contains("transformer.h.1.mlp.experts.3.c_proj.weight"));
    // Active: all but the position table and 3 of the 4 experts.
    double expert = 0;
    for (const auto& p : named)
      if (p.key().find(".experts.0.") != std::string::npos) expert += static_cast<double>(p.value().numel());
    double all = static_cast<double>(model->parameter_count());
    if (model->transformer->wpe) all -= static_cast<double>(model->transformer->wpe->weight.numel());
    CHECK(active_parameters(m) == Approx(all - 3 * expert));
    // One token, top 1 of 4: three experts see nothing, yet every parameter gets a gradient.
    const auto token = torch::randint(0, 40, {1, 1}, torch::kLong);
    model->loss_sum(token, token).backward();
    for (const auto& p : named) {
      INFO(p.key());
      CHECK(p.value().grad().defined());
    }
  }
}

TEST_CASE("moe: a routing bias chooses the experts, the probabilities stay the gates, and loads are counted once",
          "[model][moe]") {
  // Token 0 prefers experts 0 and 1; a bias of +0.5 on expert 3 makes it a choice, gated by its probability.
  const torch::Tensor probs = torch::tensor({{0.4, 0.3, 0.2, 0.1}, {0.1, 0.2, 0.3, 0.4}}).to(torch::kFloat);
  const torch::Tensor bias = torch::tensor({0.0, 0.0, 0.0, 0.5}).to(torch::kFloat);
  const Routing r = route_tokens(probs, 2, 0, bias);
  CHECK(r.chosen[0][0].item<int64_t>() == 3);
  CHECK(r.chosen[0][1].item<int64_t>() == 0);
  CHECK(at::allclose(r.gate.index_select(0, torch::tensor({0, 2})), torch::tensor({0.1f, 0.4f})));
  CHECK(at::equal(route_tokens(probs, 2, 0).chosen, std::get<1>(probs.topk(2, -1))));  // none: as before

  // DeepSeek-V3's move: up by the rate below the mean load, down above it, unchanged at it.
  torch::Tensor b = torch::zeros({4});
  move_expert_bias(b, torch::tensor({6.0, 2.0, 4.0, 4.0}, torch::kDouble), 0.01);  // mean 4
  CHECK(at::allclose(b, torch::tensor({-0.01f, 0.01f, 0.0f, 0.0f})));

  // A layer's step and line loads: every choice of every training forward, each taken on its own.
  ModelSettings m;
  m.d_model = 16, m.n_head = 2, m.n_layer = 1, m.seq_len = 8, m.vocab_size = 32;
  m.moe.experts = 4, m.moe.top_k = 2, m.moe.capacity_factor = 1.0, m.moe.balance = MoeBalance::kBias;
  auto context = std::make_shared<MoeContext>();
  MoeMlp layer(m, context);
  REQUIRE(layer->expert_bias.defined());
  layer->train();
  for (int i = 0; i < 2; ++i) layer->forward(torch::randn({3, 8, 16}));
  const torch::Tensor step = layer->take_step_load();
  CHECK(step.sum().item<int64_t>() == 2 * 24 * 2);  // dropped choices counted too
  CHECK(layer->take_step_load().sum().item<int64_t>() == 0);
  CHECK(at::equal(layer->take_line_load(), step));
  layer->eval();
  layer->forward(torch::randn({3, 8, 16}));
  CHECK(layer->take_line_load().sum().item<int64_t>() == 0);  // evaluation is no step
  m.moe.balance = MoeBalance::kAuxLoss;
  CHECK(!MoeMlp(m, context)->expert_bias.defined());
  CHECK(moe_aux_grad_scale(m, 4, 1.0) > 0);
  m.moe.balance = MoeBalance::kBias;
  CHECK(moe_aux_grad_scale(m, 4, 1.0) == 0);  // no balancing loss is trained
}
