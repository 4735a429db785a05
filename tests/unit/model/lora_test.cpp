// LoRA (model/lora.h): a LoRA model starts exactly at its base's outputs,
// only the adapters get gradients and optimizer state, merged weights give
// the unmerged model's logits and are W + (alpha / rank) B A, and the base
// fingerprint sees the base only.
#include <catch2/catch.hpp>
#include <ATen/ATen.h>

#include <map>
#include <string>

#include "checkpoint/module_weights.h"
#include "model/gpt.h"
#include "model/gpt_shapes.h"
#include "model/lora.h"
#include "optim/make_optimizer.h"
#include "optim/param_groups.h"
#include "test_util.h"

using namespace gputrain;

namespace {

ModelSettings with_lora(ModelArch arch, std::vector<LoraTarget> targets) {
  ModelSettings m = test::model_settings(50, 8, 2, 2, 16);
  m.arch = arch;
  m.lora.rank = 4;
  m.lora.alpha = 8;
  m.lora.targets = std::move(targets);
  return m;
}

const std::vector<LoraTarget> kAll = {LoraTarget::kQkv, LoraTarget::kProj, LoraTarget::kMlpUp, LoraTarget::kMlpDown};

torch::Tensor logits(Gpt& model, const torch::Tensor& tokens) {
  torch::NoGradGuard no_grad;
  model->eval();
  return model->forward(tokens);
}

}  // namespace

TEST_CASE("lora: a LoRA model starts exactly at its base model's outputs", "[model][lora]") {
  for (ModelArch arch : {ModelArch::kGpt, ModelArch::kLlama}) {
    const ModelSettings m = with_lora(arch, kAll);
    ModelSettings plain = m;
    plain.lora.rank = 0;
    torch::manual_seed(11);
    Gpt base(plain);
    torch::manual_seed(11);
    Gpt adapted(m);  // the same base weights: the adapters draw their numbers after the base's
    const auto tokens = torch::randint(0, 50, {2, 8}, torch::kLong);
    CHECK(at::equal(logits(base, tokens), logits(adapted, tokens)));
    // lora_B starts at zero, lora_A does not (else the adapters could not learn).
    for (const auto& p : adapted->named_parameters())
      if (p.key().ends_with("lora_B")) CHECK(p.value().abs().max().item<double>() == 0.0);
      else if (p.key().ends_with("lora_A")) CHECK(p.value().abs().max().item<double>() > 0.0);
  }
}

TEST_CASE("lora: only the adapters train: gradients, parameter groups and optimizer state", "[model][lora]") {
  const ModelSettings m = with_lora(ModelArch::kGpt, {LoraTarget::kQkv, LoraTarget::kMlpDown});
  torch::manual_seed(1);
  Gpt model(m);
  const auto tokens = torch::randint(0, 50, {2, 8}, torch::kLong);
  model->loss_sum(tokens, tokens).backward();
  int64_t adapters = 0, adapter_values = 0;
  for (const auto& p : model->named_parameters()) {
    INFO(p.key());
    if (is_lora_parameter(p.key())) {
      ++adapters;
      adapter_values += p.value().numel();
      CHECK(p.value().requires_grad());
      REQUIRE(p.value().grad().defined());
    } else {
      CHECK_FALSE(p.value().requires_grad());
      CHECK_FALSE(p.value().grad().defined());
    }
  }
  CHECK(adapters == 2 * 2 * 2);  // 2 blocks x 2 targets x (A, B)
  // lora_A gets a gradient only once lora_B is non-zero; lora_B's is non-zero from the start.
  CHECK(model->named_parameters()["transformer.h.0.attn.c_attn.lora_B"].grad().abs().max().item<double>() > 0);

  OptimSettings o;
  auto groups = make_param_groups(*model, o);
  int64_t grouped = 0;
  for (const auto& g : groups) grouped += static_cast<int64_t>(g.params.size());
  CHECK(grouped == adapters);
  auto optimizer = make_optimizer(groups, o);
  optimizer->step(1e-3);
  // AdamW: 8 bytes per adapter value and an 8-byte step counter per tensor; the estimate agrees.
  CHECK(optimizer->state_bytes() == 8 * adapter_values + 8 * adapters);
  CHECK(estimate_state_bytes(o, gpt_parameter_shapes(m)) == optimizer->state_bytes());
  // The shape list marks the same parameters trainable, in the model's order.
  CHECK(test::shape_list_mismatch(m, *model).empty());
}

TEST_CASE("lora: merged weights give the unmerged model's logits", "[model][lora]") {
  for (ModelArch arch : {ModelArch::kGpt, ModelArch::kLlama}) {
    ModelSettings m = with_lora(arch, kAll);
    torch::manual_seed(2);
    Gpt model(m);
    {
      torch::NoGradGuard no_grad;  // adapters as if trained
      for (auto& p : model->named_parameters())
        if (is_lora_parameter(p.key())) p.value().normal_(0.0, 0.3);
    }
    const auto tokens = torch::randint(0, 50, {2, 8}, torch::kLong);
    const auto unmerged = logits(model, tokens);
    ModelSettings plain = m;
    plain.lora.rank = 0;
    // The merge is W + (alpha / rank) B A, with the scale written out here (alpha 8, rank 4).
    const std::vector<NamedTensor> weights = module_weights(*model), merged_weights = merge_lora(weights, m.lora);
    std::map<std::string, torch::Tensor> by_name;
    for (const auto& w : weights) by_name[w.name] = w.tensor;
    int adapted = 0;
    for (const auto& w : merged_weights) {
      const std::string stem = w.name.substr(0, w.name.size() - std::string(".weight").size());
      if (!w.name.ends_with(".weight") || !by_name.count(stem + ".lora_A")) {
        CHECK(at::equal(w.tensor, by_name.at(w.name)));  // not adapted: as it was
        continue;
      }
      INFO(w.name);
      const torch::Tensor delta = at::matmul(by_name.at(stem + ".lora_B"), by_name.at(stem + ".lora_A"));
      const torch::Tensor expected = by_name.at(w.name) + 2.0 * delta;
      CHECK((w.tensor - expected).abs().max().item<double>() < 1e-6);
      ++adapted;
    }
    CHECK(adapted == 2 * 4);  // 2 blocks x 4 targets
    Gpt merged(plain);
    load_module_weights(*merged, merged_weights, "merged", "");
    CHECK((logits(merged, tokens) - unmerged).abs().max().item<double>() < 1e-5);
    Gpt base(plain);  // the adapters matter: without them the logits differ
    std::vector<NamedTensor> base_weights = module_weights(*model);
    std::erase_if(base_weights, [](const NamedTensor& w) { return is_lora_parameter(w.name); });
    load_module_weights(*base, base_weights, "base", "");
    CHECK((logits(base, tokens) - unmerged).abs().max().item<double>() > 1e-2);
  }
}

TEST_CASE("lora: the base fingerprint changes with the base weights, not the adapters", "[model][lora]") {
  const ModelSettings m = with_lora(ModelArch::kGpt, {LoraTarget::kQkv});
  torch::manual_seed(3);
  Gpt model(m);
  const std::string before = lora_base_fingerprint(module_weights(*model));
  torch::NoGradGuard no_grad;
  model->named_parameters()["transformer.h.0.attn.c_attn.lora_B"].fill_(1.0);
  CHECK(lora_base_fingerprint(module_weights(*model)) == before);
  model->named_parameters()["transformer.h.1.ln_2.weight"][0] += 1e-3;
  CHECK(lora_base_fingerprint(module_weights(*model)) != before);
}
