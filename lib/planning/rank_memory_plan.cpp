#include "planning/rank_memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "model/gpt_shapes.h"
#include "optim/make_optimizer.h"
#include "parallel/data_parallel.h"
#include "parallel/expert_parallel.h"
#include "parallel/pipeline.h"

namespace gputrain {
namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The layers tensor parallelism splits (parallel/tensor_parallel.h): c_attn and c_fc by rows,
// the projections' weights by columns.
bool split_by_tp(const std::string& name) {
  return contains(name, ".attn.c_attn.") || contains(name, ".mlp.c_fc.") || contains(name, ".attn.c_proj.weight") ||
         contains(name, ".mlp.c_proj.weight");
}

// Each weight's bytes as the optimizer keeps it (bf16-pure: bf16, else fp32).
double bytes_of_weights(const Settings& s) { return s.precision.mode == PrecisionMode::kBf16Pure ? 2 : 4; }

}  // namespace

std::vector<RankHoldings> plan_rank_memory(const Settings& s, const Grid& g) {
  const ModelSettings& m = s.model;
  const auto stages = split_stages(m, g.pp());
  const double bytes = bytes_of_weights(s);
  const double gathered_bytes = s.resolved_gather_dtype() == GatherDtype::kBf16 ? 2 : bytes;  // ZeRO-3's units
  const int64_t zero = g.replicas() > 1 ? s.parallel.zero : 0;
  struct Held {
    double numel, state;  // this rank's share before ZeRO; its optimizer state bytes
    bool trainable, expert;
  };
  std::vector<RankHoldings> out(stages.size());
  for (size_t st = 0; st < stages.size(); ++st) {
    const StageLayers& L = stages[st];
    std::vector<Held> held;
    std::map<int64_t, double> units;
    for (const ParamShape& p : gpt_parameter_shapes(m)) {
      if (!stage_holds(p.name, L, m.tie_embeddings)) continue;
      const int64_t unit = unit_of_parameter(p.name, m.n_layer);
      const bool expert = g.ep() > 1 && is_expert_parameter(p.name);
      double share = 1.0;
      if (g.tp() > 1 && split_by_tp(p.name)) share /= g.tp();
      if (expert) share /= g.ep();
      const double state = p.trainable ? static_cast<double>(estimate_state_bytes(s.optim, {p})) * share : 0.0;
      held.push_back({static_cast<double>(p.numel()) * share, state, p.trainable, expert});
      units[unit] += static_cast<double>(p.numel()) * share * gathered_bytes;
    }
    RankHoldings& r = out[st];
    r.stage = static_cast<int64_t>(st);
    for (const auto& [unit, b] : units) r.largest_unit = std::max(r.largest_unit, b);
    // ZeRO-1/2 give whole parameters to owners (parallel/data_parallel.h), dense ones over the
    // replicas (dp x cp) and experts over their holders, in gradient order; rank 0 owns the first run.
    std::vector<double> owned_state[2];  // [experts][owner]: the optimizer state each owner holds
    for (const bool experts : {false, true}) {
      const int replicas = experts ? g.replicas() / g.ep() : g.replicas();
      owned_state[experts].assign(static_cast<size_t>(replicas), 0.0);
      std::vector<const Held*> group;
      for (auto it = held.rbegin(); it != held.rend(); ++it)
        if (it->expert == experts) group.push_back(&*it);
      std::vector<int64_t> sizes;
      for (const Held* h : group)
        if (h->trainable) sizes.push_back(static_cast<int64_t>(h->numel));
      const std::vector<int> owners = partition_contiguous(sizes, replicas);
      size_t next = 0;
      for (const Held* h : group) {
        const int owner = h->trainable ? owners[next++] : -1;
        const bool owned = owner == 0;
        r.weights += h->numel * bytes / (zero == 3 ? replicas : 1);
        if (!h->trainable) continue;
        const double grads = h->numel * bytes, state = h->state;
        r.gradients += zero == 3 ? grads / replicas : zero == 2 ? (owned ? grads : 0) : grads;
        r.optimizer += zero == 3 ? state / replicas : zero >= 1 ? (owned ? state : 0) : state;
        owned_state[experts][static_cast<size_t>(owner)] += state;
      }
    }
    r.largest_optimizer = r.optimizer;
    // ZeRO-1/2: the replica at (dp d, cp c) owns dense run d x cp + c and its experts' run
    // (d / ep) x cp + c (an expert's holders are every ep-th dp rank's cp ranks).
    if (zero == 1 || zero == 2)
      for (int d = 0; d < g.dp(); ++d)
        for (int c = 0; c < g.cp(); ++c)
          r.largest_optimizer =
              std::max(r.largest_optimizer, owned_state[0][static_cast<size_t>(d * g.cp() + c)] +
                                                owned_state[1][static_cast<size_t>(d / g.ep() * g.cp() + c)]);
  }
  return out;
}

std::string rank_memory_table(const Settings& s, const Grid& g) {
  const double MiB = 1024.0 * 1024.0;
  const int64_t zero = g.replicas() > 1 ? s.parallel.zero : 0;
  std::string out = fmt::format(
      "memory per rank between steps (parallel.zero {} over dp {}{}, tp {}, pp {}, ep {}; what summary.json's "
      "memory_per_rank reports)\n\n| stage | weights MiB | gradients MiB | optimizer MiB | sum MiB "
      "|{}\n|---|---:|---:|---:|---:|{}\n",
      zero, g.dp(), g.cp() > 1 ? fmt::format(" x cp {}", g.cp()) : "", g.tp(), g.pp(), g.ep(),
      zero == 3 ? " largest unit, gathered, MiB |" : "", zero == 3 ? "---:|" : "");
  for (const RankHoldings& r : plan_rank_memory(s, g)) {
    out += fmt::format("| {} | {:.1f} | {:.1f} | {:.1f} | {:.1f} |", r.stage, r.weights / MiB, r.gradients / MiB,
                       r.optimizer / MiB, (r.weights + r.gradients + r.optimizer) / MiB);
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
