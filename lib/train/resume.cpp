#include "train/resume.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>

#include "checkpoint/checkpoint_dir.h"
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

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

// Keys whose change makes the saved weights, optimizer state or data position meaningless.
bool shape_changing(const std::string& key, const json& saved, const json& now) {
  // data.train.path may move (another mount, another cluster); the sampler state still refuses other data.
  // LoRA's dropout and what it saves, and the mixture layers' capacity and balancing weight, change
  // the numbers from here on, not what the checkpoint's tensors mean (an adapters-only checkpoint
  // checks its base by fingerprint, whatever model.init_from now says).
  static const std::vector<std::string> free = {"model.dropout", "model.attention", "model.init_from", "data.train.path",
                                                "model.lora.dropout", "model.lora.save", "model.moe.capacity_factor",
                                                "model.moe.aux_loss_coef"};
  for (const auto& k : free)
    if (key == k) return false;
  if (key == "precision.mode") return saved == "bf16-pure" || now == "bf16-pure";  // the weights' dtype
  // Of parallel.*, only tp: the optimizer state is saved per tp shard (model.init_from takes a
  // tensor-parallel checkpoint's joined weights at any tp). Otherwise it is saved whole and the data
  // position is global, so a checkpoint continues under any world size or ZeRO stage.
  for (const char* p : {"model.", "data.train.", "optim.adamw8bit."})
    if (starts_with(key, p)) return true;
  return key == "run.seed" || key == "optim.name" || key == "optim.adafactor.beta1" || key == "parallel.tp";
}

// Keys that change how long the run goes, how it reports or where it writes, not its numbers.
bool reported_only(const std::string& key) {
  for (const char* p : {"checkpoint.", "metrics.", "data.eval.", "kernels."})
    if (starts_with(key, p)) return true;
  static const std::vector<std::string> keys = {
      "train.max_steps", "train.log_every", "train.eval_every", "train.eval_steps", "optim.schedule.decay_steps",
      "train.empty_cache_steps", "train.nan_policy", "run.name", "run.output_dir", "run.threads",
      "run.memory_budget_mb", "run.cpu_malloc_cache", "run.device", "data.num_workers", "data.prefetch",
      "data.pin_memory", "model.init_from", "parallel.backend", "parallel.bucket_mb", "parallel.zero",
      "parallel.offload_optimizer", "parallel.timeout_s",
      // A pipeline's checkpoint is the whole model's (per tp rank): any stage split trains the same numbers.
      "parallel.pp", "parallel.pp_schedule", "parallel.pp_microbatches",
      // So is an expert-parallel one: every expert is gathered into it.
      "parallel.ep"};
  for (const auto& k : keys)
    if (key == k) return true;
  return false;
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

ResumeChanges compare_for_resume(const json& saved, const json& now, const fs::path& checkpoint) {
  std::map<std::string, json> a, b;
  flatten(saved, "", a);
  flatten(now, "", b);
  ResumeChanges out;
  std::string refused;
  // Another split of the same global batch over processes and micro-batches
  // (parallel.dp x per_device_batch_size x grad_accum_steps) trains on the
  // same samples per step: reported, not a divergence.
  static const std::vector<std::string> kBatchSplit = {"parallel.dp", "train.per_device_batch_size",
                                                      "train.grad_accum_steps"};
  auto global_batch = [](const std::map<std::string, json>& m) {
    int64_t n = 1;
    for (const auto& k : kBatchSplit) {
      auto it = m.find(k);
      n *= it != m.end() && it->second.is_number_integer() ? it->second.get<int64_t>() : 1;
    }
    return n;
  };
  const bool same_global_batch = global_batch(a) == global_batch(b);
  auto is_batch_split = [](const std::string& k) {
    return std::find(kBatchSplit.begin(), kBatchSplit.end(), k) != kBatchSplit.end();
  };
  for (const auto& [key, now_value] : b) {
    auto it = a.find(key);
    const json saved_value = it == a.end() ? json(nullptr) : it->second;
    if (saved_value == now_value) continue;
    RecipeChange c{key, saved_value.dump(), now_value.dump()};
    if (shape_changing(key, saved_value, now_value))
      refused += "\n    " + key + ": " + c.saved + " in the checkpoint, " + c.now + " now";
    else if (reported_only(key) || (same_global_batch && is_batch_split(key)))
      out.reported.push_back(c);
    else
      out.diverging.push_back(c);
  }
  if (!refused.empty())
    throw config_error("cannot resume from '" + checkpoint.string() +
                       "': the recipe changes keys the saved weights, optimizer state or data position depend on:" +
                       refused +
                       "\n    fix: put these keys back as the checkpoint has them (its recipe.yaml), use "
                       "model.init_from to start a new run from its weights, or set checkpoint.resume: never");
  return out;
}

}  // namespace gputrain
