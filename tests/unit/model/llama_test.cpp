// model.arch: llama: parameter names and shapes (the plan's shape list
// agrees), a float64 reference of the whole model written out here (RMSNorm,
// rotary positions by explicit angles, grouped-query attention head by head,
// SwiGLU), the fused and the math attention agreeing under grouped queries,
// and the rotary embedding's defining property.
#include <catch2/catch.hpp>
#include <ATen/ATen.h>

#include <cmath>
#include <set>

#include "model/architecture.h"
#include "model/gpt.h"
#include "test_util.h"

using namespace gputrain;

namespace {

// d 32, 4 query heads of 8, 2 key/value heads, SwiGLU width 48.
ModelSettings tiny_llama(bool bias = false, bool tied = false) {
  ModelSettings m = test::model_settings(40, 6, 2, 4, 32);
  m.arch = ModelArch::kLlama;
  m.n_kv_head = 2;
  m.mlp_width = 48;
  m.bias = bias;
  m.tie_embeddings = tied;
  m.norm_eps = 1e-5;
  m.rope_theta = 500.0;  // a small base turns every pair by a visible angle over 6 positions
  return m;
}

// Every parameter random (norm scales around 1), so each one shows in the output.
Gpt random_llama(const ModelSettings& m, torch::ScalarType dtype) {
  torch::manual_seed(3);
  Gpt model(m);
  torch::NoGradGuard no_grad;
  for (auto& p : model->named_parameters()) {
    const bool scale = p.key().find("ln_") != std::string::npos;
    p.value().normal_(scale ? 1.0 : 0.0, scale ? 0.1 : 0.2);
  }
  model->to(dtype);
  model->eval();
  return model;
}

torch::Tensor rms_norm_reference(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  return x / torch::sqrt(x.pow(2).mean(-1, true) + eps) * w;
}

// Rotates dimension i with i + D/2 by position x theta^(-2i/D), one scalar angle at a time.
torch::Tensor rotate_reference(const torch::Tensor& t, double theta) {  // [B, T, heads, D]
  const int64_t T = t.size(1), D = t.size(3);
  torch::Tensor out = t.clone();
  for (int64_t pos = 0; pos < T; ++pos)
    for (int64_t i = 0; i < D / 2; ++i) {
      const double angle =
          static_cast<double>(pos) * std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(D));
      auto a = t.select(1, pos).select(-1, i), b = t.select(1, pos).select(-1, i + D / 2);
      out.select(1, pos).select(-1, i).copy_(a * std::cos(angle) - b * std::sin(angle));
      out.select(1, pos).select(-1, i + D / 2).copy_(b * std::cos(angle) + a * std::sin(angle));
    }
  return out;
}

// The whole llama forward in float64 from the module's weights.
torch::Tensor reference_logits(Gpt& model, const torch::Tensor& tokens) {
  torch::NoGradGuard no_grad;
  const ModelSettings& m = model->cfg;
  auto params = model->named_parameters();
  auto w = [&](const std::string& n) { return params[n].detach(); };
  auto linear = [&](const torch::Tensor& x, const std::string& n) {
    torch::Tensor y = at::matmul(x, w(n + ".weight").t());
    return m.bias ? y + w(n + ".bias") : y;
  };
  const int64_t B = tokens.size(0), T = tokens.size(1), d = m.d_model, H = m.n_head, KV = m.kv_heads();
  const int64_t D = d / H, hidden = mlp_hidden(m);
  torch::Tensor x = w("transformer.wte.weight").index_select(0, tokens.reshape(-1)).view({B, T, d});
  const auto future = at::ones({T, T}, at::kBool).triu(1);
  for (int64_t l = 0; l < m.n_layer; ++l) {
    const std::string b = "transformer.h." + std::to_string(l) + ".";
    const torch::Tensor qkv = linear(rms_norm_reference(x, w(b + "ln_1.weight"), m.norm_eps), b + "attn.c_attn");
    const torch::Tensor q = rotate_reference(qkv.narrow(-1, 0, d).reshape({B, T, H, D}), m.rope_theta);
    const torch::Tensor k = rotate_reference(qkv.narrow(-1, d, KV * D).reshape({B, T, KV, D}), m.rope_theta);
    const torch::Tensor v = qkv.narrow(-1, d + KV * D, KV * D).reshape({B, T, KV, D});
    torch::Tensor y = at::zeros({B, T, H, D}, x.options());
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / KV);  // the key/value head query head h reads
      auto scores = at::matmul(q.select(2, h), k.select(2, g).transpose(1, 2)) / std::sqrt(static_cast<double>(D));
      auto att = at::softmax(scores.masked_fill(future, -INFINITY), -1);
      y.select(2, h).copy_(at::matmul(att, v.select(2, g)));
    }
    x = x + linear(y.reshape({B, T, d}), b + "attn.c_proj");
    const torch::Tensor gate_up = linear(rms_norm_reference(x, w(b + "ln_2.weight"), m.norm_eps), b + "mlp.c_fc");
    const torch::Tensor gate = gate_up.narrow(-1, 0, hidden), up = gate_up.narrow(-1, hidden, hidden);
    x = x + linear(gate * at::sigmoid(gate) * up, b + "mlp.c_proj");
  }
  x = rms_norm_reference(x, w("transformer.ln_f.weight"), m.norm_eps);
  return at::matmul(x, (m.tie_embeddings ? w("transformer.wte.weight") : w("lm_head.weight")).t());
}

}  // namespace

TEST_CASE("llama: RMSNorm, no position table, fused q/k/v and gate/up rows, the shape list matches", "[model][llama]") {
  for (bool bias : {false, true})
    for (bool tied : {false, true}) {
      CAPTURE(bias, tied);
      const ModelSettings m = tiny_llama(bias, tied);
      Gpt model(m);
      const auto named = model->named_parameters();
      std::set<std::string> names;
      for (const auto& p : named) names.insert(p.key());
      CHECK(names.count("transformer.wpe.weight") == 0);
      CHECK(names.count("transformer.h.0.ln_1.weight") == 1);
      CHECK(names.count("transformer.h.0.ln_1.bias") == 0);  // RMSNorm: a scale only
      CHECK(names.count("lm_head.weight") == (tied ? 0u : 1u));
      CHECK(names.count("transformer.h.1.attn.c_attn.bias") == (bias ? 1u : 0u));
      // q 32 rows + k and v 2 heads x 8 each; gate and up 48 each.
      CHECK(named["transformer.h.0.attn.c_attn.weight"].sizes() == std::vector<int64_t>({32 + 2 * 16, 32}));
      CHECK(named["transformer.h.0.mlp.c_fc.weight"].sizes() == std::vector<int64_t>({2 * 48, 32}));
      CHECK(named["transformer.h.0.mlp.c_proj.weight"].sizes() == std::vector<int64_t>({32, 48}));
      CHECK(test::shape_list_mismatch(m, *model).empty());
    }
}

TEST_CASE("llama: SwiGLU width auto is 2/3 of mlp_ratio x d_model, rounded up to 64", "[model][llama]") {
  ModelSettings m;
  m.arch = ModelArch::kLlama;
  CHECK(mlp_hidden(m) == 2048);  // d 768, ratio 4: 2048 exactly, GPT-2 124M's MLP parameters
  m.d_model = 4096;
  CHECK(mlp_hidden(m) == 10944);  // 10922.7 rounded up to 64
  m.mlp_width = 11008;            // Llama-7B's, set explicitly
  CHECK(mlp_hidden(m) == 11008);
  m.mlp_width = 0;
  m.arch = ModelArch::kGpt;
  CHECK(mlp_hidden(m) == 4 * 4096);
}

TEST_CASE("llama: the model equals a float64 reference written out step by step", "[model][llama]") {
  for (bool bias : {false, true}) {
    CAPTURE(bias);
    ModelSettings m = tiny_llama(bias, /*tied=*/bias);
    Gpt model = random_llama(m, torch::kDouble);
    torch::manual_seed(4);
    const auto tokens = torch::randint(0, m.vocab_size, {2, m.seq_len}, torch::kLong);
    torch::Tensor ours;
    {
      torch::NoGradGuard no_grad;
      ours = model->forward(tokens);
    }
    const torch::Tensor ref = reference_logits(model, tokens);
    REQUIRE(ours.sizes() == ref.sizes());
    CHECK(ours.scalar_type() == torch::kDouble);
    CHECK((ours - ref).abs().max().item<double>() < 1e-10);
    CHECK(ref.abs().max().item<double>() > 1.0);  // not a vacuous comparison of near-zeros
  }
}

TEST_CASE("llama: SDPA and math attention agree with grouped key/value heads, forward and backward", "[model][llama]") {
  for (int64_t kv : {1, 2, 4}) {
    CAPTURE(kv);
    ModelSettings m = tiny_llama();
    m.n_kv_head = kv;
    Gpt fused = random_llama(m, torch::kFloat);
    m.attention = AttentionImpl::kMath;
    Gpt math = random_llama(m, torch::kFloat);
    torch::manual_seed(5);
    const auto tokens = torch::randint(0, m.vocab_size, {2, m.seq_len}, torch::kLong);
    auto a = fused->loss_sum(tokens, tokens), b = math->loss_sum(tokens, tokens);
    CHECK(a.item<double>() == Approx(b.item<double>()).epsilon(1e-5));
    a.backward();
    b.backward();
    const auto ga = test::gradients_of(*fused), gb = test::gradients_of(*math);
    for (size_t i = 0; i < ga.size(); ++i)
      CHECK((ga[i] - gb[i]).norm().item<double>() <= 1e-4 * gb[i].norm().item<double>());
  }
}

TEST_CASE("mistral: a sliding window shorter than the sequence limits attention, SDPA and math alike",
          "[model][llama]") {
  ModelSettings m = tiny_llama();
  m.arch = ModelArch::kMistral;
  m.seq_len = 6;
  torch::manual_seed(5);
  const auto tokens = torch::randint(0, m.vocab_size, {2, m.seq_len}, torch::kLong);
  const auto logits = [&](int64_t window, AttentionImpl impl) {
    ModelSettings w = m;
    w.sliding_window = window;
    w.attention = impl;
    Gpt model = random_llama(w, torch::kFloat);
    torch::NoGradGuard no_grad;
    return model->forward(tokens);
  };
  const auto full = logits(0, AttentionImpl::kSdpa), windowed = logits(2, AttentionImpl::kSdpa);
  CHECK(at::allclose(windowed, logits(2, AttentionImpl::kMath), 1e-5, 1e-5));
  CHECK(at::allclose(full, logits(6, AttentionImpl::kSdpa)));  // a window as long as the sequence changes nothing
  // Positions 0 and 1 see the same tokens with or without a window of 2; position 2 on does not.
  CHECK(at::allclose(windowed.narrow(1, 0, 2), full.narrow(1, 0, 2), 1e-5, 1e-5));
  CHECK_FALSE(at::allclose(windowed.narrow(1, 2, 4), full.narrow(1, 2, 4), 1e-3, 1e-3));
}

TEST_CASE("llama: rotary scores depend only on the distance between positions", "[model][llama]") {
  ModelSettings m;
  m.d_model = 8;
  m.n_head = 1;  // one head of 8
  RotaryEmbedding rope(m);
  torch::manual_seed(6);
  const auto q = torch::randn({8}, torch::kDouble), k = torch::randn({8}, torch::kDouble);
  // The same q at every position and the same k: q_i . k_j after rotation is a function of i - j.
  const auto rq = rope.apply(q.expand({1, 1, 12, 8}).contiguous()).squeeze(),
             rk = rope.apply(k.expand({1, 1, 12, 8}).contiguous()).squeeze();
  const auto scores = at::matmul(rq, rk.t());
  for (int64_t delta : {0, 1, 5})
    for (int64_t i = delta; i < 12; ++i)
      CHECK(scores[i][i - delta].item<double>() == Approx(scores[delta][0].item<double>()).epsilon(1e-12));
  CHECK(at::allclose(rq.norm(2, -1), q.norm().expand({12})));  // a rotation keeps lengths
  CHECK(at::allclose(rq[0], q));                               // position 0 is not turned
  CHECK_FALSE(at::allclose(rq[1], q));
}
