#include "metrics/flops.h"

#include <array>
#include <utility>

#include "model/gpt_shapes.h"

namespace gputrain {

double training_flops_per_token(const ModelSettings& m) {
  // N: the parameters a token's matrix products use (active_parameters: not
  // the position table, a lookup; in mixture layers top_k of the experts).
  // Biases and norm scales count like weights, as in "6 N". Frozen weights
  // (LoRA's base) cost 4 per parameter, not 6: no weight gradient.
  double n = active_parameters(m), frozen = 0;
  if (m.lora.rank > 0)
    for (const ParamShape& p : gpt_parameter_shapes(m))
      if (!p.trainable && p.name != "transformer.wpe.weight") frozen += static_cast<double>(p.numel());
  // The attention term counts the query width (d_model unless model.head_dim says otherwise).
  const double q = static_cast<double>(m.q_width()), L = static_cast<double>(m.n_layer);
  const double T = static_cast<double>(m.seq_len);
  return 6 * n - 2 * frozen + 12 * L * T * q;
}

std::optional<double> peak_bf16_tflops(const std::string& name) {
  // Most specific names first: "H100 PCIe" also contains "H100".
  // Vendor datasheets, dense (no 2:4 sparsity) bf16 tensor-core rates.
  static const std::array<std::pair<const char*, double>, 5> kTable = {{
      {"H100 PCIe", 756.0},
      {"H100 NVL", 835.0},
      {"H100", 989.0},  // SXM (the "80GB HBM3" parts)
      {"H200", 989.0},  // and GH200
      {"A100", 312.0},
  }};
  for (const auto& [key, tflops] : kTable)
    if (name.find(key) != std::string::npos) return tflops;
  return std::nullopt;
}

std::optional<double> model_flops_utilization(double tokens_per_s, double flops_per_token, int devices,
                                              const std::string& device_name) {
  const std::optional<double> peak = peak_bf16_tflops(device_name);
  if (!peak || !(tokens_per_s > 0) || devices < 1) return std::nullopt;
  return tokens_per_s * flops_per_token / (static_cast<double>(devices) * *peak * 1e12);
}

}  // namespace gputrain
