// Training FLOPs per token and model FLOPs utilization (MFU), the figures
// metrics.jsonl, summary.json and `gputrain plan` report.
//
// FLOPs per token (forward + backward) = 6 N + 12 L T d, as nanoGPT, llm.c
// and PaLM (appendix B) count: N is every parameter that takes part in a
// token's matrix multiplies (all but the position embedding, a lookup; the
// tied token embedding counts once, as the output head; in mixture-of-experts
// layers the top_k experts of a token only), and 12 L T d is QK^T and AV at
// the full T x T (causal masking's savings are not subtracted, so numbers
// compare with the published ones). Under LoRA the frozen weights count 4
// FLOPs per parameter instead of 6 (no weight gradient is computed).
//
// MFU = tokens/s x FLOPs per token / (devices x the device's dense bf16 peak).
// The peak comes from a table of known GPUs; for any other device (the CPU
// included) there is no MFU rather than a guessed one.
#pragma once
#include <optional>
#include <string>

#include "config/settings.h"

namespace gputrain {

double training_flops_per_token(const ModelSettings& m);

// Dense bf16 tensor-core TFLOP/s of a GPU by its CUDA device name
// ("NVIDIA H100 80GB HBM3"), or nothing when the name is not in the table.
std::optional<double> peak_bf16_tflops(const std::string& device_name);

// A fraction (0.3 = 30%), or nothing without a known peak or a positive rate.
// `devices`: the processes sharing the work (data x tensor x pipeline).
std::optional<double> model_flops_utilization(double tokens_per_s, double flops_per_token, int devices,
                                              const std::string& device_name);

}  // namespace gputrain
