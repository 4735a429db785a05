#include "train/resume.h"

#include <spdlog/spdlog.h>

#include <map>

#include "checkpoint/checkpoint_dir.h"
#include "config/schema.h"
#include "util/error.h"

namespace gputrain {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

void flatten(const json& j, const std::string& prefix, std::map<std::string, json>& out) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) flatten(v, prefix.empty() ? k : prefix + "." + k, out);
  } else {
    out[prefix] = j;
  }
}

// A boolean as the word an enum writes: a key that became one of true | false | ... (e.g.
// parallel.offload_optimizer) reads the same in older checkpoints.
json as_word(const json& j) { return j.is_boolean() ? json(j.get<bool>() ? "true" : "false") : j; }

// The schema's policy for `key` (config/schema.h); a key the schema no longer has diverges.
ResumePolicy policy_of(const std::string& key) {
  const FieldSpec* f = find_field(key);
  return f ? f->on_resume : ResumePolicy::kDiverges;
}

}  // namespace

std::vector<fs::path> resume_candidates(const Settings& s) {
  const std::string& mode = s.checkpoint.resume;
  if (mode == "never") return {};
  if (mode != "auto") {
    // The cheap check gives a clear message at once; loading verifies the checksums.
    if (auto problem = checkpoint_problem(mode, CheckpointCheck::kSizes))
      throw data_error("checkpoint.resume: '" + mode + "' is not a usable checkpoint: " + *problem +
                       "\n    fix: name a complete checkpoint directory, or use checkpoint.resume: auto to take the "
                       "newest complete one");
    return {fs::path(mode)};
  }
  const CheckpointListing l = list_checkpoints(s.resolved_checkpoint_dir());
  for (const auto& [dir, why] : l.broken) spdlog::warn("checkpoint: passing over {}: {}", dir.string(), why);
  return {l.complete.rbegin(), l.complete.rend()};
}

std::optional<ResumePoint> load_resume_checkpoint(const Settings& s, const std::optional<RowShare>& keep,
                                                  bool with_model) {
  for (const fs::path& dir : resume_candidates(s)) {
    try {
      return ResumePoint{dir, load_training_checkpoint(dir, keep, with_model)};
    } catch (const Error& e) {
      if (s.checkpoint.resume != "auto") throw;
      spdlog::warn("checkpoint: passing over {}: {}", dir.string(), e.what());
    }
  }
  return std::nullopt;
}

ResumeChanges compare_for_resume(const json& saved, const json& now, const fs::path& checkpoint) {
  std::map<std::string, json> a, b, defaults;
  flatten(saved, "", a);
  flatten(now, "", b);
  flatten(settings_to_json(Settings{}), "", defaults);
  ResumeChanges out;
  std::string refused;
  // Another split of the same global batch over processes and micro-batches
  // (parallel.dp x per_device_batch_size x grad_accum_steps) trains on the
  // same samples per step: reported, not a divergence.
  auto global_batch = [](const std::map<std::string, json>& m) {
    int64_t n = 1;
    for (const auto& [key, value] : m)
      if (policy_of(key) == ResumePolicy::kBatchSplit && value.is_number_integer()) n *= value.get<int64_t>();
    return n;
  };
  const bool same_global_batch = global_batch(a) == global_batch(b);
  for (const auto& [key, now_value] : b) {
    // A key newer than the checkpoint reads as its default: the saved run ran as the default runs now.
    auto it = a.find(key);
    auto d = defaults.find(key);
    const json saved_value = it != a.end() ? it->second : d != defaults.end() ? d->second : json(nullptr);
    if (as_word(saved_value) == as_word(now_value)) continue;
    RecipeChange c{key, saved_value.dump(), now_value.dump()};
    ResumePolicy p = policy_of(key);
    if (p == ResumePolicy::kWeightDtype)
      p = saved_value == "bf16-pure" || now_value == "bf16-pure" ? ResumePolicy::kRefused : ResumePolicy::kDiverges;
    if (p == ResumePolicy::kBatchSplit) p = same_global_batch ? ResumePolicy::kReported : ResumePolicy::kDiverges;
    if (p == ResumePolicy::kRefused)
      refused += "\n    " + key + ": " + c.saved + " in the checkpoint, " + c.now + " now";
    else if (p == ResumePolicy::kReported) out.reported.push_back(c);
    else out.diverging.push_back(c);
  }
  if (!refused.empty())
    throw config_error(
        "cannot resume from '" + checkpoint.string() +
        "': the recipe changes keys the saved weights, optimizer state or data position depend on:" + refused +
        "\n    fix: put these keys back as the checkpoint has them (its recipe.yaml), use "
        "model.init_from to start a new run from its weights, or set checkpoint.resume: never");
  return out;
}

}  // namespace gputrain
