// The GPT model: shapes, GPT-2 parameter names and count, initialization,
// and a finite-difference gradient check in float64.
#include <catch2/catch.hpp>
#include <ATen/ATen.h>

#include <cmath>
#include <set>

#include "model/gpt.h"
#include "test_util.h"

using namespace gputrain;

namespace {

ModelSettings tiny_model() { return gputrain::test::model_settings(32, 8, 2, 2, 16); }

}  // namespace

TEST_CASE("GPT forward gives B x T x vocab logits", "[model]") {
  torch::manual_seed(0);
  Gpt model(tiny_model());
  auto tokens = torch::randint(0, 32, {3, 8}, torch::kLong);
  auto logits = model->forward(tokens);
  CHECK(logits.sizes() == std::vector<int64_t>({3, 8, 32}));
  auto shorter = model->forward(tokens.slice(1, 0, 5));  // shorter than seq_len is fine
  CHECK(shorter.size(1) == 5);
  CHECK_THROWS(model->forward(torch::randint(0, 32, {1, 9}, torch::kLong)));
}

TEST_CASE("GPT parameters carry GPT-2's names and count", "[model]") {
  ModelSettings m = tiny_model();
  Gpt model(m);
  std::set<std::string> names;
  for (const auto& p : model->named_parameters()) names.insert(p.key());
  for (const char* n :
       {"transformer.wte.weight", "transformer.wpe.weight", "transformer.h.0.ln_1.weight", "transformer.h.0.ln_1.bias",
        "transformer.h.0.attn.c_attn.weight", "transformer.h.0.attn.c_attn.bias", "transformer.h.0.attn.c_proj.weight",
        "transformer.h.1.mlp.c_fc.weight", "transformer.h.1.mlp.c_proj.bias", "transformer.ln_f.weight",
        "transformer.ln_f.bias"})
    CHECK(names.count(n) == 1);
  CHECK(names.count("lm_head.weight") == 0);  // tied to wte

  // 12 * L * d^2 + ... : the GPT-2 formula for the parameter count.
  const int64_t V = m.vocab_size, T = m.seq_len, d = m.d_model, L = m.n_layer;
  const int64_t per_block = (3 * d * d + 3 * d) + (d * d + d) + (4 * d * d + 4 * d) + (4 * d * d + d) + 4 * d;
  CHECK(model->parameter_count() == V * d + T * d + L * per_block + 2 * d);

  m.tie_embeddings = false;
  m.bias = false;
  Gpt untied(m);
  std::set<std::string> untied_names;
  for (const auto& p : untied->named_parameters()) untied_names.insert(p.key());
  CHECK(untied_names.count("lm_head.weight") == 1);
  CHECK(untied_names.count("transformer.h.0.attn.c_attn.bias") == 0);
}

TEST_CASE("GPT-2 initialization: std 0.02, scaled residual projections", "[model]") {
  ModelSettings m = tiny_model();
  m.d_model = 128;
  m.n_head = 4;
  m.n_layer = 8;
  torch::manual_seed(0);
  Gpt model(m);
  auto params = model->named_parameters();
  CHECK(params["transformer.h.0.mlp.c_fc.weight"].std().item<double>() == Approx(0.02).epsilon(0.05));
  CHECK(params["transformer.h.0.mlp.c_proj.weight"].std().item<double>() ==
        Approx(0.02 / std::sqrt(16.0)).epsilon(0.05));
  CHECK(params["transformer.h.0.attn.c_attn.bias"].abs().max().item<double>() == 0.0);
  CHECK(params["transformer.ln_f.weight"].min().item<double>() == 1.0);
}

TEST_CASE("GPT initial loss is close to log(vocab)", "[model]") {
  torch::manual_seed(1);
  Gpt model(tiny_model());
  auto tokens = torch::randint(0, 32, {4, 8}, torch::kLong);
  auto targets = torch::randint(0, 32, {4, 8}, torch::kLong);
  auto loss = model->loss_sum(tokens, targets).item<double>() / 32.0;
  CHECK(loss == Approx(std::log(32.0)).margin(0.2));
}

TEST_CASE("GPT gradients match finite differences (float64)", "[model]") {
  torch::manual_seed(2);
  ModelSettings m = tiny_model();
  m.d_model = 8;
  m.n_layer = 1;
  Gpt model(m);
  model->to(torch::kDouble);
  auto tokens = torch::randint(0, 32, {2, 6}, torch::kLong);
  auto targets = torch::randint(0, 32, {2, 6}, torch::kLong);
  targets[0][2] = kIgnoreIndex;  // ignored targets take no part

  model->zero_grad();
  model->loss_sum(tokens, targets).backward();
  torch::NoGradGuard no_grad;
  int checked = 0;
  for (const auto& item : model->named_parameters()) {
    auto p = item.value();
    auto flat = p.view(-1);
    auto grad = p.grad().view(-1);
    for (int64_t idx : {int64_t(0), flat.numel() / 2, flat.numel() - 1}) {
      const double h = 1e-6, orig = flat[idx].item<double>();
      flat[idx] = orig + h;
      double up = model->loss_sum(tokens, targets).item<double>();
      flat[idx] = orig - h;
      double down = model->loss_sum(tokens, targets).item<double>();
      flat[idx] = orig;
      double numeric = (up - down) / (2 * h);
      INFO(item.key() << "[" << idx << "]");
      CHECK(grad[idx].item<double>() == Approx(numeric).margin(1e-7).epsilon(1e-5));
      ++checked;
    }
  }
  CHECK(checked > 30);
}

TEST_CASE("GPT dropout acts in training mode only, and not at all when p = 0", "[model]") {
  auto tokens = torch::randint(0, 32, {2, 8}, torch::kLong);
  ModelSettings m = tiny_model();
  m.dropout = 0.5;
  torch::manual_seed(5);
  Gpt noisy(m);
  noisy->train();
  CHECK_FALSE(torch::equal(noisy->forward(tokens), noisy->forward(tokens)));
  noisy->eval();
  CHECK(torch::equal(noisy->forward(tokens), noisy->forward(tokens)));

  m.dropout = 0.0;
  Gpt plain(m);
  plain->train();
  CHECK(torch::equal(plain->forward(tokens), plain->forward(tokens)));
}

TEST_CASE("model: Linear initializes as torch::nn::Linear does and applies its taps around the product", "[model]") {
  torch::manual_seed(5);
  Linear ours(8, 6, true);
  torch::manual_seed(5);
  torch::nn::Linear theirs(torch::nn::LinearOptions(8, 6));
  CHECK(torch::equal(ours->weight, theirs->weight));
  CHECK(torch::equal(ours->bias, theirs->bias));
  const auto x = torch::randn({2, 3, 8});
  CHECK(torch::allclose(ours(x), theirs(x), 1e-6, 1e-6));
  // Taps: the input one before the product, the output one before the bias.
  ours->input_tap = [](const torch::Tensor& t) { return t * 2; };
  ours->output_tap = [](const torch::Tensor& y) { return y * 3; };
  const auto expected = at::linear(x, ours->weight) * 6 + ours->bias;
  CHECK(torch::allclose(ours(x), expected, 1e-5, 1e-5));
  CHECK_FALSE(Linear(4, 4, false)->bias.defined());
}
