#include "checkpoint/training_checkpoint.h"

#include <torch/version.h>

#include <cmath>
#include <map>
#include <tuple>

#include "checkpoint/checkpoint_dir.h"
#include "util/error.h"
#include "util/text_file.h"
#include "util/version.h"

namespace gputrain {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

constexpr const char* kStateFormat = "gputrain-training-state";
constexpr int kStateVersion = 1;

json optional_number(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

std::vector<NamedTensor> rng_tensors(const RngSnapshot& r) {
  std::vector<NamedTensor> t = {{"cpu", r.cpu}};
  if (r.cuda.defined()) t.push_back({"cuda", r.cuda});
  return t;
}

std::string shard_file(const char* stem, size_t rank) {
  return std::string(stem) + ".tp" + std::to_string(rank) + ".safetensors";
}

json split_to_json(const std::vector<TensorShard>& split) {
  json out = json::array();
  for (const auto& t : split)
    if (t.dim >= 0) out.push_back({t.name, t.dim, t.sections});
  return out;
}

// trainer.json's "tensor_parallel": the tp degree (1 when absent) and the split parameters.
std::pair<size_t, std::vector<TensorShard>> tensor_parallel_of(const json& j) {
  const auto it = j.find("tensor_parallel");
  if (it == j.end() || it->is_null()) return {1, {}};
  std::vector<TensorShard> split;
  for (const auto& e : it->at("split")) {
    TensorShard t{e.at(0).get<std::string>(), e.at(1).get<int64_t>()};
    // Relative section sizes; a count of equal sections in checkpoints before grouped-query attention.
    if (e.at(2).is_array()) t.sections = e.at(2).get<std::vector<int64_t>>();
    else t.sections.assign(e.at(2).get<size_t>(), 1);
    split.push_back(std::move(t));
  }
  return {it->at("size").get<size_t>(), split};
}

json read_json_file(const fs::path& p) {
  try {
    return json::parse(read_text_file(p, "checkpoint file", "resume from another checkpoint"));
  } catch (const json::exception& e) {
    throw data_error("'" + p.string() + "' is malformed: " + e.what() + "\n    fix: resume from another checkpoint");
  }
}

// Each tp rank's lists joined into whole tensors by name (a parameter not in `split` is whole in every file).
std::vector<NamedTensor> join_shards(const std::vector<std::vector<NamedTensor>>& shards,
                                     const std::vector<TensorShard>& split, const fs::path& dir) {
  std::map<std::string, const TensorShard*> how;
  for (const auto& t : split) how[t.name] = &t;
  std::vector<NamedTensor> whole;
  for (const auto& first : shards.front()) {
    const auto it = how.find(first.name);
    if (it == how.end()) {
      whole.push_back(first);
      continue;
    }
    std::vector<torch::Tensor> parts;
    for (size_t r = 0; r < shards.size(); ++r) {
      const NamedTensor* mine = nullptr;
      for (const auto& e : shards[r])
        if (e.name == first.name) mine = &e;
      if (!mine)
        throw data_error("checkpoint '" + dir.string() + "': " + shard_file("model", r) + " lacks '" + first.name +
                         "'\n    fix: resume from another checkpoint");
      parts.push_back(mine->tensor);
    }
    whole.push_back({first.name, unshard(parts, *it->second)});
  }
  return whole;
}

// The whole model from model.safetensors, or from the `tp` shard files joined.
std::vector<NamedTensor> read_model_files(const fs::path& dir, size_t tp, const std::vector<TensorShard>& split) {
  if (tp == 1) return read_safetensors((dir / "model.safetensors").string()).tensors;
  std::vector<std::vector<NamedTensor>> shards;
  for (size_t r = 0; r < tp; ++r) shards.push_back(read_safetensors((dir / shard_file("model", r)).string()).tensors);
  return join_shards(shards, split, dir);
}

}  // namespace

std::vector<NamedTensor> read_checkpoint_model(const fs::path& dir) {
  const auto [tp, split] = tensor_parallel_of(read_json_file(dir / "trainer.json"));
  return read_model_files(dir, tp, split);
}

fs::path save_training_checkpoint(const fs::path& root, const TrainingSnapshot& s) {
  CheckpointWriter w(root, s.counters.step);
  if (s.model_shards.empty()) {
    w.add_safetensors("model.safetensors", s.model, {{"format", "gputrain"}});
    w.add_safetensors("optimizer.safetensors", s.optimizer_state, {{"optimizer", s.optimizer}});
  }
  for (size_t r = 0; r < s.model_shards.size(); ++r) {
    const std::string of = std::to_string(s.model_shards.size());
    w.add_safetensors(shard_file("model", r), s.model_shards[r],
                      {{"format", "gputrain"}, {"tp_rank", std::to_string(r)}, {"tp_size", of}});
    w.add_safetensors(shard_file("optimizer", r), s.optimizer_shards.at(r),
                      {{"optimizer", s.optimizer}, {"tp_rank", std::to_string(r)}, {"tp_size", of}});
  }
  w.add_safetensors("rng.safetensors", rng_tensors(s.rng));
  const TrainingCounters& c = s.counters;
  json j;
  j["format"] = kStateFormat;
  j["version"] = kStateVersion;
  j["step"] = c.step;
  j["tokens"] = c.tokens;
  j["train_s"] = c.train_seconds;
  j["last_loss"] = optional_number(c.last_loss);
  j["last_eval_loss"] = c.last_eval ? json(*c.last_eval) : json(nullptr);
  j["nan_skipped_steps"] = c.nan_skipped_steps;
  j["spike_skipped_steps"] = c.spike_skipped_steps;
  j["spike_rollbacks"] = c.spike_rollbacks;
  j["metrics_bytes"] = c.metrics_bytes;
  j["per_device_batch_size"] = s.per_device_batch_size;
  j["grad_accum_steps"] = s.grad_accum_steps;
  j["sampler"] = sampler_state_to_json(s.sampler);
  j["loss_scaler"] = s.scaler ? json{{"scale", s.scaler->scale},
                                     {"growth_tracker", s.scaler->growth_tracker},
                                     {"skipped_steps", s.scaler->skipped_steps}}
                              : json(nullptr);
  j["cuda_rng_device"] = s.rng.cuda_index;
  j["optimizer"] = s.optimizer;
  j["gputrain_version"] = version_string();
  j["torch_version"] = TORCH_VERSION;
  j["settings"] = s.settings;
  if (!s.lora_base.empty()) j["lora_base"] = s.lora_base;  // model files hold LoRA's adapters only
  if (!s.model_shards.empty())
    j["tensor_parallel"] = {{"size", s.model_shards.size()}, {"split", split_to_json(s.tp_split)}};
  w.add_json("trainer.json", j);
  w.add_text("recipe.yaml", s.recipe_yaml);
  return w.commit();
}

bool is_training_checkpoint(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "trainer.json", ec) &&
         (fs::is_regular_file(dir / "model.safetensors", ec) || fs::is_regular_file(dir / shard_file("model", 0), ec));
}

TrainingSnapshot load_training_checkpoint(const fs::path& dir) {
  if (auto problem = checkpoint_problem(dir))
    throw data_error(
        "checkpoint '" + dir.string() + "' is not usable: " + *problem +
        "\n    fix: resume from another checkpoint (checkpoint.resume: auto picks the newest complete one)");
  TrainingSnapshot s;
  const fs::path state_path = dir / "trainer.json";
  size_t tp = 1;
  try {
    const json j = json::parse(read_text_file(state_path, "checkpoint file", "resume from another checkpoint"));
    if (j.at("format") != kStateFormat || j.at("version").get<int>() > kStateVersion)
      throw data_error("'" + state_path.string() + "' is not a gputrain training state this version can read (format " +
                       j.at("format").dump() + ", version " + j.at("version").dump() + ")" +
                       "\n    fix: resume with the gputrain version that wrote it");
    TrainingCounters& c = s.counters;
    c.step = j.at("step").get<int64_t>();
    c.tokens = j.at("tokens").get<int64_t>();
    c.train_seconds = j.at("train_s").get<double>();
    c.last_loss = j.at("last_loss").is_null() ? NAN : j.at("last_loss").get<double>();
    if (!j.at("last_eval_loss").is_null()) c.last_eval = j.at("last_eval_loss").get<double>();
    c.nan_skipped_steps = j.at("nan_skipped_steps").get<int64_t>();
    c.spike_skipped_steps = j.value("spike_skipped_steps", int64_t{0});  // absent before the spike guard
    c.spike_rollbacks = j.value("spike_rollbacks", int64_t{0});
    c.metrics_bytes = j.at("metrics_bytes").get<int64_t>();
    s.per_device_batch_size = j.at("per_device_batch_size").get<int64_t>();
    s.grad_accum_steps = j.at("grad_accum_steps").get<int64_t>();
    s.sampler = sampler_state_from_json(j.at("sampler"));
    if (const json& ls = j.at("loss_scaler"); !ls.is_null())
      s.scaler = LossScalerState{ls.at("scale").get<double>(), ls.at("growth_tracker").get<int64_t>(),
                                 ls.at("skipped_steps").get<int64_t>()};
    s.rng.cuda_index = j.at("cuda_rng_device").get<int>();
    s.optimizer = j.at("optimizer").get<std::string>();
    s.settings = j.at("settings");
    s.lora_base = j.value("lora_base", std::string());
    std::tie(tp, s.tp_split) = tensor_parallel_of(j);
  } catch (const json::exception& e) {
    throw data_error("'" + state_path.string() + "' is malformed: " + e.what() +
                     "\n    fix: resume from another checkpoint");
  }
  s.recipe_yaml = read_text_file(dir / "recipe.yaml", "checkpoint file", "resume from another checkpoint");
  s.model = read_model_files(dir, tp, s.tp_split);
  if (tp == 1) s.optimizer_state = read_safetensors((dir / "optimizer.safetensors").string()).tensors;
  for (size_t r = 0; tp > 1 && r < tp; ++r)
    s.optimizer_shards.push_back(read_safetensors((dir / shard_file("optimizer", r)).string()).tensors);
  const SafetensorsFile rng = read_safetensors((dir / "rng.safetensors").string());
  const torch::Tensor* cpu = rng.find("cpu");
  if (!cpu) throw data_error("'" + (dir / "rng.safetensors").string() + "' has no 'cpu' generator state");
  s.rng.cpu = *cpu;
  if (const torch::Tensor* cuda = rng.find("cuda")) s.rng.cuda = *cuda;
  return s;
}

}  // namespace gputrain
