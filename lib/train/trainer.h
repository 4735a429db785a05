// The training run: builds model, optimizer, schedule and data from a
// resolved recipe, runs the loop, and writes the metrics contract's files.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "config/recipe.h"

namespace gputrain {

struct RunOptions {
  bool overwrite = false;  // replace an earlier run's files in output_dir
};

struct RunOutcome {
  std::string status;  // ok | interrupted | preempted (failures throw)
  int signal = 0;      // the stop signal, when interrupted/preempted
  nlohmann::ordered_json summary;
};

// Throws gputrain::Error; on a failure after training started, summary.json
// is still written with status "failed" and the error.
RunOutcome run_training(const Recipe& recipe, const RunOptions& options);

}  // namespace gputrain
