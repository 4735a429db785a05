// Generation's pieces: the KV-cached forward (model/gpt.h KvCache) gives the full forward's logits
// when tokens come one at a time, for learned and rotary positions, grouped-query attention, a
// sliding window shorter than the sequence, both attention implementations and a mixture of
// experts; and choosing tokens (model/sampling.h) against transformers' logits warpers.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "checkpoint/safetensors.h"
#include "model/gpt.h"
#include "model/sampling.h"
#include "test_util.h"

using namespace gputrain;
using namespace gputrain::test;

namespace {

// Logits of the whole sequence at once, and of the same tokens fed as a prompt of `prompt`
// tokens then one at a time through the cache.
std::pair<torch::Tensor, torch::Tensor> full_and_cached(const ModelSettings& m, int64_t prompt) {
  torch::manual_seed(3);
  Gpt model(m);
  model->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor tokens = at::randint(0, m.vocab_size, {2, m.seq_len}, at::kLong);
  const torch::Tensor full = model->forward(tokens);
  KvCache cache;
  std::vector<torch::Tensor> parts = {model->forward_cached(tokens.narrow(1, 0, prompt), cache)};
  for (int64_t t = prompt; t < m.seq_len; ++t) parts.push_back(model->forward_cached(tokens.narrow(1, t, 1), cache));
  CHECK(cache.length == m.seq_len);
  return {full, at::cat(parts, 1)};
}

}  // namespace

TEST_CASE("generation: the KV-cached forward gives the full forward's logits token by token", "[model]") {
  struct Case {
    const char* name;
    ModelArch arch;
    int64_t kv_heads, window;
    AttentionImpl impl;
    int64_t experts;
  };
  for (const Case& c : {Case{"gpt2 (learned positions)", ModelArch::kGpt, 0, 0, AttentionImpl::kSdpa, 0},
                        Case{"llama (rotary, grouped-query)", ModelArch::kLlama, 2, 0, AttentionImpl::kSdpa, 0},
                        Case{"llama, math attention", ModelArch::kLlama, 2, 0, AttentionImpl::kMath, 0},
                        Case{"mistral (window 5 < 20)", ModelArch::kMistral, 2, 5, AttentionImpl::kSdpa, 0},
                        Case{"mistral, math attention", ModelArch::kMistral, 2, 5, AttentionImpl::kMath, 0},
                        Case{"gpt2 with a mixture of experts", ModelArch::kGpt, 0, 0, AttentionImpl::kSdpa, 4}}) {
    INFO(c.name);
    ModelSettings m = model_settings(96, 20, 2, 4, 32);
    m.arch = c.arch;
    m.n_kv_head = c.kv_heads;
    m.sliding_window = c.window;
    m.attention = c.impl;
    if (c.experts > 0) {
      m.moe.experts = c.experts;
      m.moe.top_k = 2;
      m.moe.capacity_factor = 0;  // no token dropped: dropping depends on the batch's tokens
    }
    const auto [full, cached] = full_and_cached(m, 7);
    CHECK(at::allclose(full, cached, 1e-5, 1e-5));
  }
}

TEST_CASE("generation: the cache refuses positions past the model's context", "[model]") {
  Gpt model(model_settings(64, 8, 1, 2, 16));
  model->eval();
  torch::NoGradGuard no_grad;
  KvCache cache;
  model->forward_cached(at::zeros({1, 8}, at::kLong), cache);
  CHECK_THROWS(model->forward_cached(at::zeros({1, 1}, at::kLong), cache));
}

TEST_CASE("sampling: temperature, top-k and top-p filter the logits as transformers' warpers do", "[model][python]") {
  TempDir dir;
  torch::manual_seed(11);
  const torch::Tensor logits = at::randn({4, 50}) * 3;
  write_safetensors(dir.file("logits.safetensors"), {{"logits", logits}});
  struct Case {
    double temperature;
    int64_t top_k;
    double top_p;
  };
  for (const Case& c :
       {Case{0.7, 0, 1.0}, Case{1.0, 5, 1.0}, Case{1.3, 0, 0.9}, Case{0.8, 10, 0.5}, Case{1.0, 0, 0.05}}) {
    INFO("temperature " << c.temperature << " top_k " << c.top_k << " top_p " << c.top_p);
    const CommandResult r =
        run_python({std::string(GPUTRAIN_SOURCE_DIR) + "/tests/reference/hf_interop.py", "warpers", "-",
                    dir.file("logits.safetensors"), dir.file("out.safetensors"), std::to_string(c.temperature),
                    std::to_string(c.top_k), std::to_string(c.top_p)});
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const torch::Tensor expected = *read_safetensors(dir.file("out.safetensors")).find("filtered");
    const torch::Tensor ours = filter_logits(logits, {c.temperature, c.top_k, c.top_p});
    CHECK(at::equal(ours.isinf(), expected.isinf()));
    CHECK(at::allclose(ours.masked_fill(ours.isinf(), 0), expected.masked_fill(expected.isinf(), 0), 1e-6, 1e-6));
    CHECK(ours.isfinite().sum(-1).min().item<int64_t>() >= 1);  // every row keeps a token
  }
}

TEST_CASE("sampling: greedy takes the argmax, and a seed draws the same tokens in the right proportions", "[model]") {
  const torch::Tensor logits = at::log(at::tensor({0.1, 0.6, 0.3}, at::kFloat)).unsqueeze(0).repeat({20000, 1});
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(5);
  CHECK(at::equal(choose_next_tokens(logits, {0.0, 0, 1.0}, g), at::ones({20000}, at::kLong)));
  CHECK(at::equal(choose_next_tokens(logits, {1.0, 1, 1.0}, g), at::ones({20000}, at::kLong)));  // top-k 1
  at::Generator a = at::make_generator<at::CPUGeneratorImpl>(7), b = at::make_generator<at::CPUGeneratorImpl>(7);
  const torch::Tensor draws = choose_next_tokens(logits, {1.0, 0, 1.0}, a);
  CHECK(at::equal(draws, choose_next_tokens(logits, {1.0, 0, 1.0}, b)));
  const torch::Tensor share = at::bincount(draws, {}, 3).to(at::kDouble) / 20000.0;
  CHECK(share[0].item<double>() == Approx(0.1).margin(0.01));
  CHECK(share[1].item<double>() == Approx(0.6).margin(0.015));
  // top-p 0.85 keeps 0.6 + 0.3: the least likely token is never drawn.
  const torch::Tensor nucleus = choose_next_tokens(logits, {1.0, 0, 0.85}, a);
  CHECK(at::bincount(nucleus, {}, 3)[0].item<int64_t>() == 0);
}
