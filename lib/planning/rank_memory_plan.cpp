#include "planning/rank_memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "model/gpt_shapes.h"
#include "model/quantized_weight.h"
#include "objective/objectives.h"
#include "optim/make_optimizer.h"
#include "parallel/rank_layout.h"

namespace gputrain {
namespace {

// Each weight's bytes as the optimizer keeps it (bf16-pure: bf16, else fp32).
double bytes_of_weights(const Settings& s) { return s.precision.mode == PrecisionMode::kBf16Pure ? 2 : 4; }

double state_bytes_of(const Settings& s, const HeldParameter& h) {
  return h.trainable ? static_cast<double>(estimate_state_bytes(s.optim, {h})) : 0.0;
}

// ZeRO-1/2: the optimizer state the rank of `l` updates (every trainable parameter's without ZeRO).
double owned_state(const Settings& s, const RankLayout& l) {
  double state = 0;
  for (const HeldParameter& h : l.parameters)
    if (l.owns(h)) state += state_bytes_of(s, h);
  return state;
}

}  // namespace

std::vector<RankHoldings> plan_rank_memory(const Settings& s, const Grid& g) {
  const ModelSettings& m = s.model;
  const std::vector<ParamShape> shapes = gpt_parameter_shapes(m);
  const double bytes = bytes_of_weights(s);
  const double gathered_bytes = s.resolved_gather_dtype() == GatherDtype::kBf16 ? 2 : bytes;  // ZeRO-3's units
  std::vector<RankHoldings> out(static_cast<size_t>(g.pp()));
  for (int st = 0; st < g.pp(); ++st) {
    // Each stage's dp, tp and cp rank 0 (parallel/rank_layout.h: what it holds and owns).
    auto layout_at = [&](int dp, int cp) { return rank_layout(shapes, m, s.parallel, g, g.rank_of({dp, st, 0, cp})); };
    const RankLayout l = layout_at(0, 0);
    RankHoldings& r = out[static_cast<size_t>(st)];
    r.stage = st;
    std::map<int64_t, double> units;
    for (const HeldParameter& h : l.parameters) {
      const double numel = static_cast<double>(h.numel());
      const int replicas = h.expert ? l.expert_replicas : l.replicas;  // the ranks sharing its ZeRO-3 rows
      // model.quantize: 4 bits, under ZeRO-3 sharded and gathered as such (parallel/sharded_4bit_base.h).
      // A tensor-parallel slice keeps its absmax decoded (parallel/tensor_parallel_4bit.h).
      const bool in_4bit = is_quantized_base(m, h.name, h.sizes);
      const double held = !in_4bit ? numel * bytes
                          : h.split.dim >= 0
                              ? static_cast<double>(quant4_storage_bytes(h.numel(), m.quantize.block_size, false))
                              : static_cast<double>(quantized_base_bytes(m, h.name, h.sizes));
      // The vocabulary tables, spread over the ranks, are used part by part and never gathered
      // (parallel/vocabulary_parts.h), unless reshard_after_forward is off.
      const bool by_parts = s.parallel.reshard_after_forward && replicas > 1 &&
                            (h.name == "transformer.wte.weight" || h.name == "lm_head.weight");
      if (!by_parts) units[unit_of_parameter(h.name, m.n_layer)] += in_4bit ? held : numel * gathered_bytes;
      r.weights += held / (l.zero == 3 ? replicas : 1);
      if (!h.trainable) continue;
      const double grads = numel * bytes, state = state_bytes_of(s, h);
      r.gradients += l.zero == 3 ? grads / replicas : l.zero == 2 ? (l.owns(h) ? grads : 0) : grads;
      r.optimizer += l.zero == 3 ? state / replicas : l.owns(h) ? state : 0;
    }
    for (const auto& [unit, b] : units) r.largest_unit = std::max(r.largest_unit, b);
    // The copy is built as the policy and sliced, sharded and staged as its weights are.
    if (holds_frozen_reference(s)) r.reference = r.weights;
    r.largest_optimizer = r.optimizer;
    // ZeRO-1/2: owners differ between the replicas; the one with the most state.
    if (l.zero == 1 || l.zero == 2)
      for (int d = 0; d < g.dp(); ++d)
        for (int c = 0; c < g.cp(); ++c)
          r.largest_optimizer = std::max(r.largest_optimizer, owned_state(s, layout_at(d, c)));
  }
  return out;
}

std::string rank_memory_table(const Settings& s, const Grid& g) {
  const double MiB = 1024.0 * 1024.0;
  const int64_t zero = g.replicas() > 1 ? s.parallel.zero : 0;  // as parallel/rank_layout.h's
  const bool reference = holds_frozen_reference(s);
  std::string out = fmt::format(
      "memory per rank between steps (parallel.zero {} over dp {}{}, tp {}, pp {}, ep {}; what summary.json's "
      "memory_per_rank reports{})\n\n| stage | weights MiB | gradients MiB | optimizer MiB |{} sum MiB "
      "|{}\n|---|---:|---:|---:|{}---:|{}\n",
      zero, g.dp(), g.cp() > 1 ? fmt::format(" x cp {}", g.cp()) : "", g.tp(), g.pp(), g.ep(),
      reference ? ", and DPO's frozen reference copy, laid out as the policy" : "",
      reference ? " reference copy MiB |" : "", zero == 3 ? " largest unit, gathered, MiB |" : "",
      reference ? "---:|" : "", zero == 3 ? "---:|" : "");
  for (const RankHoldings& r : plan_rank_memory(s, g)) {
    out += fmt::format("| {} | {:.1f} | {:.1f} | {:.1f} |", r.stage, r.weights / MiB, r.gradients / MiB,
                       r.optimizer / MiB);
    if (reference) out += fmt::format(" {:.1f} |", r.reference / MiB);
    out += fmt::format(" {:.1f} |", (r.weights + r.gradients + r.optimizer + r.reference) / MiB);
    if (zero == 3) out += fmt::format(" {:.1f} |", r.largest_unit / MiB);
    out += "\n";
  }
  if (zero == 3)
    out +=
        "\nZeRO-3 also holds, while a unit is in use, its whole weights (and in backward its whole gradients); with "
        "the "
        "next unit's prefetch, about two units at a time (tied embeddings: the embedding for the whole step).\n";
  if (zero == 3 && s.parallel.offload_params)
    out +=
        "\nparallel.offload_params: on a CUDA run the weights, gradients and optimizer state above are in host memory "
        "(the weights pinned); the GPU holds only the units in use and the activations.\n";
  if (zero == 3 && s.parallel.offload_optimizer == OptimizerOffload::kNvme)
    out +=
        "\nparallel.offload_optimizer nvme: the optimizer state above is in a file of each rank under "
        "parallel.offload_dir (its disk needs that much free per rank on the machine); memory holds about two "
        "units' state during the update." +
        std::string(s.resolved_gather_dtype() == GatherDtype::kBf16 && bytes_of_weights(s) == 4
                        ? " Units gathered in bf16: the fp32 weights above are in that file too, and memory holds "
                          "their bf16 copies (half the weights column).\n"
                        : "\n");
  return out;
}

}  // namespace gputrain
