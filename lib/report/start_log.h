// The run's start-up lines (what it trains, on what, with what, from where), built from values the
// trainer gathers once everything is built: no object of the run is reached from here.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/settings.h"

namespace gputrain {

struct StartFacts {
  std::string recipe_source, device;
  int64_t threads = 1;
  int64_t parameters = 0;       // the whole model's
  int64_t rank_parameters = 0;  // what this rank's model counts (the state's bytes per parameter divide by it)
  std::string precision;        // Precision::describe
  std::string optimizer;        // Optimizer::describe
  int64_t optimizer_state_bytes = 0;
  std::string optimizer_placement;  // Optimizer::placement ("" in memory)
  int64_t recomputed_blocks = 0;    // activation checkpointing
  std::string data;                 // the training source's description
  int64_t samples_per_epoch = 0;    // 0: endless (synthetic)
  int64_t sequences_per_step = 0;   // this rank's
  std::optional<double> entropy_floor;
  int64_t dp = 1;
  std::string output_dir;
  std::string parallelism;  // parallel/parallelize.h describe_parallelism; "" for one process
  struct Resumed {
    std::string dir;
    int64_t step = 0, tokens = 0, first_sample = 0;
    double read_s = 0;
  };
  std::optional<Resumed> resumed;
};

// The lines, in order, for the log's info level.
std::vector<std::string> start_log_lines(const Settings& s, const StartFacts& f);

}  // namespace gputrain
