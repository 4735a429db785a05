#include "report/model_options_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "config/schema.h"
#include "model/gpt_shapes.h"
#include "model/mixture_loads.h"
#include "model/moe.h"
#include "optim/make_optimizer.h"
#include "parallel/process_groups.h"

namespace gputrain {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

double round3(double v) { return std::round(v * 1000.0) / 1000.0; }

struct LoraCounts {
  int64_t trainable = 0, frozen = 0;
  int64_t full_state_bytes = 0;  // a full fine-tune's optimizer state, estimated
};

LoraCounts count_lora(const Settings& s) {
  std::vector<ParamShape> shapes = gpt_parameter_shapes(s.model);
  LoraCounts c;
  for (const auto& p : shapes) (p.trainable ? c.trainable : c.frozen) += p.numel();
  ModelSettings full = s.model;
  full.lora.rank = 0;
  c.full_state_bytes = estimate_state_bytes(s.optim, gpt_parameter_shapes(full));
  return c;
}

}  // namespace

nlohmann::ordered_json lora_report(const Settings& s, int64_t optimizer_state_bytes) {
  if (s.model.lora.rank == 0) return nullptr;
  const LoraCounts c = count_lora(s);
  nlohmann::ordered_json j;
  j["rank"] = s.model.lora.rank;
  j["alpha"] = s.model.lora.alpha;
  j["targets"] = settings_to_json(s)["model"]["lora"]["targets"];
  j["trainable_parameters"] = c.trainable;
  j["frozen_parameters"] = c.frozen;
  j["optimizer_state_mb"] = round3(static_cast<double>(optimizer_state_bytes) / kMiB);
  j["full_finetune_optimizer_state_mb"] = round3(static_cast<double>(c.full_state_bytes) / kMiB);
  j["save"] = s.model.lora.save == LoraSave::kAdapters ? "adapters" : "full";
  return j;
}

std::string lora_log_line(const Settings& s) {
  if (s.model.lora.rank == 0) return "";
  const LoraCounts c = count_lora(s);
  return fmt::format(
      "LoRA rank {} (alpha {}): {} adapter parameters train ({:.2f}% of {}), the rest are frozen; a full "
      "fine-tune's optimizer state would be {:.1f} MiB; checkpoints hold {}",
      s.model.lora.rank, s.model.lora.alpha, c.trainable,
      100.0 * static_cast<double>(c.trainable) / static_cast<double>(c.trainable + c.frozen), c.trainable + c.frozen,
      static_cast<double>(c.full_state_bytes) / kMiB,
      s.model.lora.save == LoraSave::kAdapters ? "the adapters only" : "every weight");
}

void MoeMetrics::add_to(nlohmann::ordered_json& rec, Gpt& model, const ProcessGroups& groups) {
  if (!model->moe) return;
  MoeContext& c = *model->moe;
  // The counts, then each mixture layer's expert loads (zeros for the layers another stage holds).
  std::vector<double> values = {c.aux_sum, static_cast<double>(c.aux_terms), static_cast<double>(c.assigned),
                                static_cast<double>(c.dropped)};
  const int64_t E = model->cfg.moe.experts;
  const std::vector<double> loads = mixture_loads(model, [](MoeMlpImpl& layer) { return layer.take_line_load(); });
  values.insert(values.end(), loads.begin(), loads.end());
  const std::vector<double> sums = groups.sum_over_world(std::move(values), "mixture-of-experts statistics");
  c.reset_stats();
  if (sums[1] > 0) last_aux_ = sums[0] / sums[1];
  assigned_ += sums[2];
  dropped_ += sums[3];
  rec["moe_aux_loss"] = std::round(last_aux_ * 1e6) / 1e6;
  rec["moe_dropped_fraction"] = sums[2] > 0 ? std::round(sums[3] / sums[2] * 1e6) / 1e6 : 0.0;
  // The busiest expert's assignments over the mean (1 = even), averaged over the mixture layers.
  double ratio = 0;
  int64_t counted = 0;
  for (size_t first = 4; first < sums.size(); first += static_cast<size_t>(E)) {
    const auto begin = sums.begin() + static_cast<long>(first), end = begin + E;
    const double total = std::accumulate(begin, end, 0.0);
    if (total <= 0) continue;
    ratio += *std::max_element(begin, end) / (total / static_cast<double>(E));
    ++counted;
  }
  if (counted == 0) return;
  const double line = ratio / static_cast<double>(counted);
  rec["moe_load_max_mean"] = std::round(line * 1e4) / 1e4;
  load_ratio_sum_ += line;
  ++load_lines_;
}

nlohmann::ordered_json MoeMetrics::summary(const ModelSettings& m) const {
  if (!m.moe.enabled()) return nullptr;
  nlohmann::ordered_json j;
  j["experts"] = m.moe.experts;
  j["top_k"] = m.moe.top_k;
  j["layers"] = moe_layer_count(m);
  j["capacity_factor"] = m.moe.capacity_factor;
  j["aux_loss"] = std::round(last_aux_ * 1e6) / 1e6;  // the last logged interval's
  j["dropped_fraction"] =
      assigned_ > 0 ? std::round(dropped_ / assigned_ * 1e6) / 1e6 : 0.0;  // the whole run (since this process started)
  j["assignments"] = assigned_;
  // The busiest expert's load over the mean, averaged over the log lines (each since the one before).
  j["load_max_mean"] =
      load_lines_ > 0 ? std::round(load_ratio_sum_ / static_cast<double>(load_lines_) * 1e4) / 1e4 : 0.0;
  j["balance"] = m.moe.balance == MoeBalance::kBias ? "bias" : "aux_loss";
  j["active_parameters"] = active_parameters(m);
  return j;
}

}  // namespace gputrain
