#include "optim/fused_update.h"

#include <map>
#include <utility>

#include "optim/quantization.h"
#include "util/error.h"

namespace gputrain {

bool fused_update_available(const torch::Device& device) {
  // Meta: shapes alone, never stepped, chosen for as the host's (optim/streamed_optimizer.h's description).
  if (device.is_meta()) return true;
#ifdef GPUTRAIN_WITH_CUDA
  return device.is_cpu() || device.is_cuda();
#else
  return device.is_cpu();
#endif
}

QuantMaps make_quant_maps(const torch::Device& device) {
  const at::Tensor s = dynamic_quant_map(true), u = dynamic_quant_map(false);
  QuantMaps maps{s.to(device), u.to(device), nullptr, nullptr};
  if (device.is_cpu()) {
    maps.signed_table = std::make_shared<NearestCodeTable>(s);
    maps.unsigned_table = std::make_shared<NearestCodeTable>(u);
  }
  return maps;
}

namespace {

// Items split by (device, dtype): each part runs as one launch or loop.
template <class Item>
std::map<std::pair<std::string, int>, std::vector<Item>> partition(const std::vector<Item>& items) {
  std::map<std::pair<std::string, int>, std::vector<Item>> parts;
  for (const auto& it : items) {
    if (!fused_update_available(it.param.device()))
      throw runtime_error("fused optimizer update: no kernel for device " + it.param.device().str() +
                          "\n    fix: set optim.impl: foreach");
    parts[{it.param.device().str(), static_cast<int>(it.param.scalar_type())}].push_back(it);
  }
  return parts;
}

}  // namespace

void fused_adamw(const std::vector<FusedAdamWItem>& items) {
  for (const auto& [key, part] : partition(items)) {
    if (part.front().param.is_cuda()) fused_adamw_cuda(part);
    else fused_adamw_cpu(part);
  }
}

void fused_adamw8bit(const std::vector<FusedAdamW8bitItem>& items, const QuantMaps& maps) {
  for (const auto& [key, part] : partition(items)) {
    if (part.front().param.device() != maps.signed_code.device())
      throw runtime_error("fused 8-bit AdamW: the quantization maps are on " + maps.signed_code.device().str() +
                          ", the parameters on " + part.front().param.device().str());
    if (part.front().param.is_cuda()) fused_adamw8bit_cuda(part, maps);
    else fused_adamw8bit_cpu(part, maps);
  }
}

#ifndef GPUTRAIN_WITH_CUDA
void fused_adamw_cuda(const std::vector<FusedAdamWItem>&) {
  throw runtime_error("fused optimizer update: this build has no CUDA kernels");
}
void fused_adamw8bit_cuda(const std::vector<FusedAdamW8bitItem>&, const QuantMaps&) {
  throw runtime_error("fused optimizer update: this build has no CUDA kernels");
}
#endif

}  // namespace gputrain
