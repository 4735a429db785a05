// train.spike_policy: loss spikes that are finite, which nan_policy never sees. A step is a spike
// when its loss or its gradient norm lies more than train.spike_threshold standard deviations
// above the mean of the last train.spike_window accepted steps (judged once that many were seen;
// the deviation is floored at 1% of the mean, so a flat curve's noise is none). Spikes stay out
// of the window. What a spike does (skip the update, or roll back to the last checkpoint) is the
// trainer's (train/trainer.cpp).
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <deque>
#include <set>
#include <string>

#include "config/settings.h"
#include "data/loader.h"

namespace gputrain {

struct SpikeVerdict {
  bool spike = false;
  double loss_z = 0, grad_norm_z = 0;  // standard deviations above the window's mean
};

class SpikeGuard {
 public:
  SpikeGuard(int64_t window, double threshold) : window_(window), threshold_(threshold) {}
  // Judges a step; a step that is no spike joins the window.
  SpikeVerdict judge(double loss, double grad_norm);

 private:
  int64_t window_;
  double threshold_;
  std::deque<double> losses_, grad_norms_;
};

// What the run reports of a spike at `step`: summary.json's event (before its "action"), the
// warning, and the error once train.spike_max_rollbacks is spent.
nlohmann::ordered_json spike_event(int64_t step, double loss, double grad_norm, const SpikeVerdict& v);
std::string spike_warning(int64_t step, double loss, double grad_norm, const SpikeVerdict& v, int64_t window,
                          const std::string& action);
std::string too_many_rollbacks_message(int64_t step, double loss, const SpikeVerdict& v, int64_t rollbacks);
// summary.json's "spikes".
nlohmann::ordered_json spike_report(const TrainSettings& t, int64_t skipped_steps, int64_t rollbacks,
                                    const nlohmann::ordered_json& events);

// Fault injection for tests: the steps listed in GPUTRAIN_POISON_STEPS ("25,40") train on a
// poisoned batch (poison_batch). Empty when the variable is unset.
std::set<int64_t> poisoned_steps_from_environment();
// Replaces every target that takes loss with a random id below `vocab` (seeded by `step`): a batch
// the model cannot predict, whose loss and gradients spike.
void poison_batch(Batch& b, int64_t vocab, int64_t step);

}  // namespace gputrain
