#include "report/model_options_report.h"

#include <fmt/format.h>

#include <cmath>

#include "config/schema.h"
#include "model/gpt_shapes.h"
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
  const std::vector<double> sums = groups.sum_over_world(
      {c.aux_sum, static_cast<double>(c.aux_terms), static_cast<double>(c.assigned), static_cast<double>(c.dropped)},
      "mixture-of-experts statistics");
  c.reset_stats();
  if (sums[1] > 0) last_aux_ = sums[0] / sums[1];
  assigned_ += sums[2];
  dropped_ += sums[3];
  rec["moe_aux_loss"] = std::round(last_aux_ * 1e6) / 1e6;
  rec["moe_dropped_fraction"] = sums[2] > 0 ? std::round(sums[3] / sums[2] * 1e6) / 1e6 : 0.0;
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
  j["active_parameters"] = active_parameters(m);
  return j;
}

}  // namespace gputrain
