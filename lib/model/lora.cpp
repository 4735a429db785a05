#include "model/lora.h"

#include <ATen/ATen.h>

#include <map>

#include "model/gpt.h"
#include "util/crc32c.h"
#include "util/error.h"

namespace gputrain {
namespace {

Linear& target_linear(BlockImpl& block, LoraTarget target) {
  if (!block.mlp && (target == LoraTarget::kMlpUp || target == LoraTarget::kMlpDown))
    throw config_error(
        "model.lora.targets: mlp_up and mlp_down cannot adapt a mixture-of-experts layer"
        "\n    fix: adapt qkv and proj only");
  switch (target) {
    case LoraTarget::kQkv:
      return block.attn->c_attn;
    case LoraTarget::kProj:
      return block.attn->c_proj;
    case LoraTarget::kMlpUp:
      return block.mlp->c_fc;
    case LoraTarget::kMlpDown:
      return block.mlp->c_proj;
  }
  throw std::logic_error("unknown LoRA target");
}

}  // namespace

const char* lora_target_module(LoraTarget target) {
  switch (target) {
    case LoraTarget::kQkv:
      return "attn.c_attn";
    case LoraTarget::kProj:
      return "attn.c_proj";
    case LoraTarget::kMlpUp:
      return "mlp.c_fc";
    case LoraTarget::kMlpDown:
      return "mlp.c_proj";
  }
  return "?";
}

void add_lora_adapters(GptImpl& model, const LoraSettings& lora) {
  for (auto& p : model.parameters()) p.requires_grad_(false);
  for (const auto& m : *model.transformer->h) {
    auto& block = *m->as<Block>();
    for (LoraTarget t : lora.targets)
      target_linear(block, t)->add_lora(lora.rank, lora.alpha / static_cast<double>(lora.rank), lora.dropout);
  }
}

static void set_adapters_off(GptImpl& model, bool off) {
  for (const auto& m : model.modules(/*include_self=*/false))
    if (auto* linear = m->as<LinearImpl>()) linear->lora_off = off;
}

AdaptersOff::AdaptersOff(GptImpl& model) : model_(model) { set_adapters_off(model_, true); }
AdaptersOff::~AdaptersOff() { set_adapters_off(model_, false); }

bool is_lora_parameter(const std::string& name) { return name.ends_with(".lora_A") || name.ends_with(".lora_B"); }

std::vector<NamedTensor> merge_lora(const std::vector<NamedTensor>& weights, const LoraSettings& lora) {
  std::map<std::string, torch::Tensor> adapters;
  for (const auto& [name, t] : weights)
    if (is_lora_parameter(name)) adapters[name] = t;
  const double scale = lora.alpha / static_cast<double>(lora.rank);
  std::vector<NamedTensor> out;
  for (const auto& [name, t] : weights) {
    if (is_lora_parameter(name)) continue;
    const std::string stem = name.ends_with(".weight") ? name.substr(0, name.size() - 7) : "";
    auto a = adapters.find(stem + ".lora_A"), b = adapters.find(stem + ".lora_B");
    if (stem.empty() || a == adapters.end() || b == adapters.end()) {
      out.push_back({name, t});
      continue;
    }
    // In float32 whatever the training dtype, then back to it.
    const torch::Tensor delta = at::matmul(b->second.to(at::kFloat), a->second.to(at::kFloat)) * scale;
    out.push_back({name, (t.to(at::kFloat) + delta.to(t.device())).to(t.scalar_type())});
  }
  return out;
}

std::string lora_base_fingerprint(const std::vector<NamedTensor>& weights) {
  Crc32c crc;
  for (const auto& [name, t] : weights) {
    if (is_lora_parameter(name)) continue;
    crc.update(name.data(), name.size());
    const torch::Tensor bytes = t.detach().to(torch::kCPU, torch::kFloat).contiguous();
    crc.update(bytes.data_ptr(), static_cast<size_t>(bytes.nbytes()));
  }
  return "crc32c:" + crc.hex();
}

}  // namespace gputrain
