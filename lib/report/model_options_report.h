// What the LoRA and mixture-of-experts options add to a run's reports: the
// log line and summary.json's "lora" object (adapters vs frozen parameters,
// and the optimizer state against a full fine-tune's), and the mixture
// layers' balancing loss and dropped-token fraction in metrics.jsonl and
// summary.json's "moe" object. docs/models.md documents the keys.
#pragma once
#include <nlohmann/json.hpp>

#include "config/settings.h"
#include "model/gpt.h"

namespace gputrain {

class ProcessGroups;

// summary.json's "lora" (null without LoRA); optimizer_state_bytes is the real optimizer's.
nlohmann::ordered_json lora_report(const Settings& s, int64_t optimizer_state_bytes);
// The log line for a LoRA run ("" without LoRA).
std::string lora_log_line(const Settings& s);

// Mixture-of-experts statistics between log lines and over the run.
class MoeMetrics {
 public:
  // Adds moe_aux_loss (the mean balancing loss of the layer forwards since
  // the last line), moe_dropped_fraction and moe_load_max_mean (the busiest
  // expert's assignments over the mean since the last line, averaged over the
  // mixture layers) to `rec`, summed over every rank
  // (a collective: every rank calls it at the same steps), and resets the
  // model's counters. Nothing without model.moe.
  void add_to(nlohmann::ordered_json& rec, Gpt& model, const ProcessGroups& groups);
  // summary.json's "moe" (null without model.moe).
  nlohmann::ordered_json summary(const ModelSettings& m) const;

 private:
  double last_aux_ = 0;
  double assigned_ = 0, dropped_ = 0;  // over the run (this process)
  double load_ratio_sum_ = 0;          // moe_load_max_mean summed over the log lines
  int64_t load_lines_ = 0;
};

}  // namespace gputrain
