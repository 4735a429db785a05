#include "report/run_summary.h"

#include <torch/version.h>

#include <fmt/format.h>

#include <cmath>

#include "config/recipe.h"
#include "config/schema.h"
#include "util/device.h"
#include "metrics/progress.h"

namespace gputrain {

using json = nlohmann::ordered_json;

double round_to(double v, int digits) {
  const double f = std::pow(10.0, digits);
  return std::round(v * f) / f;
}

double run_tokens_per_s(const RunTotals& t) {
  return round_to(t.train_seconds > 0 ? static_cast<double>(t.tokens) / t.train_seconds : 0.0, 1);
}

json build_summary(const std::string& status, const RunTotals& t, const Settings& s, const Optimizer& optimizer,
                   const SummaryFacts& f, const SummaryParts& parts) {
  json j;
  j["status"] = status;
  if (!t.stop_reason.empty()) j["stop_reason"] = t.stop_reason;
  if (t.resumed_from >= 0) j["resumed_from_step"] = t.resumed_from;
  j["steps"] = t.step;
  j["max_steps"] = s.train.max_steps;
  j["tokens"] = t.tokens;
  j["wall_s"] = round_to(f.wall_s, 3);          // this process
  j["train_s"] = round_to(t.train_seconds, 3);  // the whole run, resumed parts included
  j["tokens_per_s"] = run_tokens_per_s(t);
  j["final_loss"] = std::isfinite(t.last_loss) ? json(round_to(t.last_loss, 6)) : json(nullptr);
  j["eval_loss"] = t.last_eval ? json(round_to(*t.last_eval, 6)) : json(nullptr);
  if (f.entropy_floor) j["entropy_floor"] = round_to(*f.entropy_floor, 6);
  j["mem_peak_mb"] = round_to(peak_memory_mb(f.device), 1);
  if (f.device.is_cpu()) j["mem_start_mb"] = round_to(t.mem_start_mb, 1);  // resident before the model existed
  j["precision"] = settings_to_json(s)["precision"]["mode"];
  j["per_device_batch_size"] = s.train.per_device_batch_size;
  j["grad_accum_steps"] = s.train.grad_accum_steps;
  j["skipped_steps"] = f.skipped_steps;
  j["parameters"] = f.parameters;
  j["optimizer"] = optimizer.describe();
  j["optimizer_state_mb"] = round_to(static_cast<double>(optimizer.state_bytes()) / (1024.0 * 1024.0), 3);
  j["device"] = device_name(f.device);
  j["threads"] = f.threads;
  j["torch_version"] = TORCH_VERSION;
  j["recipe_hash"] = recipe_hash(s);
  j["world_size"] = parts.world_size;
  if (!parts.data_sources.is_null()) j["data_sources"] = parts.data_sources;
  if (parts.mfu) j["mfu"] = round_to(*parts.mfu, 4);
  if (!parts.lora.is_null()) j["lora"] = parts.lora;
  if (!parts.moe.is_null()) j["moe"] = parts.moe;
  if (!parts.cuda_graphs.is_null()) j["cuda_graphs"] = parts.cuda_graphs;
  if (!parts.spikes.is_null()) j["spikes"] = parts.spikes;
  if (parts.bf16_copy_tensors > 0)
    j["bf16_weight_copies"] = {{"tensors", parts.bf16_copy_tensors},
                               {"mb", round_to(static_cast<double>(parts.bf16_copy_bytes) / (1024.0 * 1024.0), 3)}};
  for (const auto& [key, value] : parts.parallel.items()) j[key] = value;
  return j;
}

std::string finish_line(const std::string& status, const RunTotals& t, double wall_s, double tokens_per_s) {
  return fmt::format("{}: {} steps, {} tokens in {}, {:.0f} tokens/s; final loss {:.4f}{}", status, t.step, t.tokens,
                     format_duration(wall_s), tokens_per_s, t.last_loss,
                     t.last_eval ? fmt::format(", eval loss {:.4f}", *t.last_eval) : std::string());
}

}  // namespace gputrain
