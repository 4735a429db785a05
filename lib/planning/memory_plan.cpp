#include "planning/memory_plan.h"

#include <torch/cuda.h>

#include <algorithm>
#include <cstdio>

#include "metrics/flops.h"
#include "model/architecture.h"
#include "model/gpt_shapes.h"
#include "objective/objectives.h"
#include "model/quantized_weight.h"
#include "optim/make_optimizer.h"
#include "parallel/ring_attention.h"
#include "util/sequence_chunks.h"

namespace gputrain {
namespace {

int64_t count_parameters(const std::vector<ParamShape>& shapes, bool trainable_only = false) {
  int64_t n = 0;
  for (const auto& p : shapes)
    if (p.trainable || !trainable_only) n += p.numel();
  return n;
}

}  // namespace

MemoryPlan plan_memory(const Settings& s, int64_t batch) {
  const ModelSettings& m = s.model;
  MemoryPlan p;
  const std::vector<ParamShape> shapes = gpt_parameter_shapes(m);
  p.parameters = count_parameters(shapes);
  const double N = static_cast<double>(p.parameters), L = static_cast<double>(m.n_layer);
  const double T = static_cast<double>(m.seq_len), d = static_cast<double>(m.d_model);
  const double h = static_cast<double>(mlp_hidden(m)), V = static_cast<double>(m.padded_vocab());
  const double H = static_cast<double>(m.n_head);
  p.flops_per_token = training_flops_per_token(m);

  const PrecisionMode mode = s.precision.mode;
  const bool pure = mode == PrecisionMode::kBf16Pure;
  const bool mixed = mode == PrecisionMode::kBf16 || mode == PrecisionMode::kFp16;
  const double w = pure ? 2 : 4;  // bytes per weight and per gradient
  // model.quantize: the block Linears' weights in 4 bits (no low-precision copy either: dequantized per use).
  // The product dequantizes one Linear at a time in the compute dtype; counted twice, since a freed one
  // may still be held for reuse (run.cpu_malloc_cache, CUDA's caching allocator) as the next is made.
  double quantized = 0, largest = 0;
  for (const auto& sh : shapes)
    if (is_quantized_base(m, sh.name, sh.sizes)) {
      quantized += static_cast<double>(sh.numel());
      largest = std::max(largest, static_cast<double>(sh.numel()));
      p.weights += static_cast<double>(quantized_base_bytes(m, sh.name, sh.sizes));
    }
  p.dequantized = largest * 2 * (mixed || pure ? 2 : 4);
  p.weights += (N - quantized) * w + p.dequantized;
  p.gradients = static_cast<double>(count_parameters(shapes, /*trainable_only=*/true)) * w;  // LoRA: adapters only
  p.optimizer = static_cast<double>(estimate_state_bytes(s.optim, shapes));  // fp32 moments also for bf16 weights

  // Per token and block, backward keeps: ln_1 in/out, q k v, attention out,
  // c_proj in, ln_2 in/out, c_fc out, gelu out (9 d + 2 h values), plus the
  // attention probabilities with math attention and dropout masks with dropout.
  // Under autocast the residual stream (the norms' inputs) stays fp32. k and
  // v are kv wide; rotary positions keep the rotated q and k too, and SwiGLU
  // keeps gate/up (2 h), silu(gate) and the product (4 h in all).
  const Architecture& arch = architecture(m);
  const bool rotary = arch.positions == PositionKind::kRotary;
  const double kv = static_cast<double>(m.kv_width());
  // A mixture layer keeps its routed copies of the input and the experts' values
  // for top_k assignments per token, and fp32 router probabilities (approximated
  // for every block when model.moe is on).
  const double mlp_values = (arch.mlp == MlpKind::kSwiGlu ? 4 : 2) * h + d;
  const double moe_factor = m.moe.enabled() ? static_cast<double>(m.moe.top_k) : 1.0;
  const double inner =
      4 * d + 2 * kv + (rotary ? d + kv : 0) + moe_factor * mlp_values +
      (m.moe.enabled() ? 2.0 * static_cast<double>(m.moe.experts) : 0.0);  // besides the norms' 2 d inputs
  const double e = (mixed || pure) ? 2 : 4;
  const bool on_gpu = s.run.device.rfind("cuda", 0) == 0 || (s.run.device == "auto" && torch::cuda::is_available());
  const double cp = static_cast<double>(s.parallel.cp);
  const bool ring = cp > 1 && s.parallel.cp_method == ContextMethod::kRing;  // keeps no [., T] scores
  double per_block = mixed ? 2 * d * 4 + inner * e : (2 * d + inner) * e;
  if (m.attention == AttentionImpl::kMath && !ring) per_block += H * T * (2 * e + 1);  // scores, probabilities, mask
  if (m.dropout > 0) per_block += 3 * d + h;                                           // bool masks (bytes)
  // Context parallelism: this rank's T / cp tokens. allgather: each block also keeps the keys and
  // values it gathered, and the forward keeps one [T / cp, T] mask (booleans and attention's additive
  // copy in the compute dtype). ring: each block keeps its float32 log-sum-exp (its output is
  // attention's, counted above); the working space is ring_working_bytes (parallel/ring_attention.h):
  // the key/value blocks and their gradients in flight, the block per query head, and one tile of
  // query rows' mask (and on GPUs the tile's float32 scores, weights and their gradient).
  const int64_t held_tokens = sequence_chunks(m.seq_len, s.parallel.cp, 0).tokens();  // every cp rank alike
  const double tokens = static_cast<double>(batch) * static_cast<double>(held_tokens);
  const double cp_kept =
      ring ? tokens * 4 * H : static_cast<double>(batch) * 2 * kv * (T - static_cast<double>(held_tokens)) * e;
  const double exchange = !(cp > 1) ? 0.0
                          : ring
                              ? ring_working_bytes(batch, m.n_head, m.q_width(), m.kv_width(), held_tokens, e, on_gpu)
                              : tokens * T * (1 + e);
  const double blocks_plain = L * per_block;
  // A checkpointed block keeps only its input; in backward one block at a time is recomputed in full.
  double recomputed = 0;
  if (s.train.gradient_checkpointing == CheckpointingPolicy::kFull) recomputed = L;
  if (s.train.gradient_checkpointing == CheckpointingPolicy::kSelective)
    recomputed = static_cast<double>((m.n_layer + s.train.checkpoint_every - 1) / s.train.checkpoint_every);
  const double blocks_ckpt = (L - recomputed) * per_block + recomputed * d * e + (recomputed > 0 ? per_block : 0);
  const double outside = (3 * d) * e;  // embeddings sum and the final LayerNorm's input/output
  // In backward, the gradients flowing through one block need about that
  // block's activations again as working space.
  p.activations_plain = tokens * (blocks_plain + outside + per_block) + (L + 1) * cp_kept + exchange;
  p.activations = tokens * (blocks_ckpt + outside + per_block) +
                  (L - recomputed + (recomputed > 0 ? 1 : 0) + 1) * cp_kept + exchange;
  // The loss. On CUDA the fused cross-entropy (model/cross_entropy.h) keeps
  // only the logits in the compute dtype, and backward writes their gradient
  // over them. Elsewhere fp32 logits and their log-softmax are kept; at the
  // start of backward the loss's gradient and the logits' gradient join them
  // (plus the low-precision logits under autocast).
  const double logit_bytes = mode == PrecisionMode::kFp32 || mode == PrecisionMode::kTf32 ? 4 : 2;
  p.logits = on_gpu ? tokens * V * logit_bytes : tokens * V * (4 * 4 + (mixed ? 2 : 0));
  // DPO's frozen reference copy: the weights once more (no low-precision copy: cast per use).
  if (holds_frozen_reference(s)) p.reference = p.weights - p.dequantized;
  // A low-precision copy of every weight: autocast's casts for the step, or the bf16 weight copies
  // the fused AdamW keeps (train/weight_copies.h) for Linear weights.
  if (mixed) p.weights += (N - quantized) * 2;
  return p;
}

std::string memory_plan_table(const Settings& s, const MemoryPlan& p) {
  const double MiB = 1024.0 * 1024.0;
  auto row = [&](const char* what, double bytes, const char* how) {
    char line[256];
    std::snprintf(line, sizeof line, "| %s | %.1f | %s |\n", what, bytes / MiB, how);
    return std::string(line);
  };
  const bool pure = s.precision.mode == PrecisionMode::kBf16Pure;
  std::string out = "| component | MiB | how |\n|---|---:|---|\n";
  const bool mixed = s.precision.mode == PrecisionMode::kBf16 || s.precision.mode == PrecisionMode::kFp16;
  const std::string weights_how =
      std::string(pure    ? "2 bytes x parameters (bf16)"
                  : mixed ? "4 bytes x parameters (fp32) + 2 (low-precision copy: autocast's or bf16 weight copies)"
                          : "4 bytes x parameters (fp32)") +
      (s.model.quantize.enabled() ? "; model.quantize: the blocks' Linear weights in 4 bits (codes and statistics), "
                                    "and the largest dequantized twice (the one in use and a freed one held for reuse)"
                                  : "");
  out += row("weights", p.weights, weights_how.c_str());
  const bool lora = s.model.lora.rank > 0;  // only the adapters have gradients and optimizer state
  const std::string grads_how =
      std::string(pure ? "2" : "4") + " bytes x " + (lora ? "LoRA adapter parameters" : "parameters");
  out += row("gradients", p.gradients, grads_how.c_str());
  const std::string optim_how =
      optim_name(s.optim.name) + ": " + optimizer_state_rule(s.optim) + (lora ? " (LoRA: of the adapters only)" : "");
  out += row("optimizer state", p.optimizer, optim_how.c_str());
  out += row("activations", p.activations,
             s.parallel.cp == 1 ? "kept for backward, one micro-batch, with the recipe's checkpointing"
             : s.parallel.cp_method == ContextMethod::kRing
                 ? "kept for backward, one micro-batch (this rank's seq_len / cp tokens, each block's float32 "
                   "log-sum-exp, one ring step's working space), with the recipe's checkpointing"
                 : "kept for backward, one micro-batch (this rank's seq_len / cp tokens, the keys and values gathered "
                   "from the cp group, the attention mask), with the recipe's checkpointing");
  out += row("activations without checkpointing", p.activations_plain, "(for comparison; not in the total)");
  out += row(
      "logits and loss", p.logits,
      "micro-batch x seq_len (/ cp) x vocab x 16-18 bytes at the peak of backward (CUDA, fused loss: 2-4, the gradient "
      "written over the logits)");
  if (p.reference > 0)
    out +=
        row("reference model", p.reference, "DPO's frozen copy of the starting weights (train.preference.reference)");
  out += row("total (estimate)", p.total(),
             p.reference > 0 ? "weights + gradients + optimizer + activations + logits + reference"
                             : "weights + gradients + optimizer + activations + logits");
  return out;
}

}  // namespace gputrain
