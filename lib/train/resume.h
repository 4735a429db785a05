// Which checkpoint a run continues from (checkpoint.resume), and which
// recipe changes a resume accepts, as each key's ResumePolicy in the schema
// says (config/schema.h). Shape-changing keys (the model, the training data,
// the seed, the optimizer and its state layout, bf16-pure) are refused; keys
// that only change how long or how visibly the run goes (max_steps, the
// schedule's length, log/eval/checkpoint cadence, threads, output) are
// reported; anything else (lr, clipping...) is allowed with a warning that
// the run no longer continues as it would have.
#pragma once
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/training_checkpoint.h"
#include "config/settings.h"

namespace gputrain {

// checkpoint.resume: never -> none; a path -> that directory (verified:
// a DataError with the reason when it is incomplete or corrupt); auto -> the
// complete checkpoints under checkpoint.dir, newest first, with a warning for
// each broken one passed over. The caller tries them in order.
std::vector<std::filesystem::path> resume_candidates(const Settings& s);

struct ResumePoint {
  std::filesystem::path dir;
  TrainingSnapshot snapshot;
};

// The checkpoint this run continues from, loaded; none when there is none to continue from.
// auto passes over a checkpoint that fails to load, with a warning; a named one is an error.
// `keep`: a ZeRO-3 rank's share of the optimizer state; `with_model`: whether the snapshot holds the
// whole model (checkpoint/training_checkpoint.h).
std::optional<ResumePoint> load_resume_checkpoint(const Settings& s, const std::optional<RowShare>& keep = std::nullopt,
                                                  bool with_model = true);

struct RecipeChange {
  std::string key;  // "train.max_steps"
  std::string saved, now;
};
struct ResumeChanges {
  std::vector<RecipeChange> reported;   // safe: cadence, length, output
  std::vector<RecipeChange> diverging;  // allowed, but the run continues differently
};

// Compares the settings a checkpoint was saved with (settings_to_json) with
// this run's. Throws a ConfigError listing every shape-changing key that differs.
ResumeChanges compare_for_resume(const nlohmann::ordered_json& saved, const nlohmann::ordered_json& now,
                                 const std::filesystem::path& checkpoint);

}  // namespace gputrain
