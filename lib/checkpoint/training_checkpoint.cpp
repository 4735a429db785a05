#include "checkpoint/training_checkpoint.h"

#include <torch/version.h>

#include <fstream>
#include <sstream>

#include "checkpoint/checkpoint_dir.h"
#include "util/error.h"
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

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw data_error("cannot read '" + p.string() + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

fs::path save_training_checkpoint(const fs::path& root, const TrainingSnapshot& s) {
  CheckpointWriter w(root, s.counters.step);
  w.add_safetensors("model.safetensors", s.model, {{"format", "gputrain"}});
  w.add_safetensors("optimizer.safetensors", s.optimizer_state, {{"optimizer", s.optimizer}});
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
  w.add_json("trainer.json", j);
  w.add_text("recipe.yaml", s.recipe_yaml);
  return w.commit();
}

bool is_training_checkpoint(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "trainer.json", ec) && fs::is_regular_file(dir / "model.safetensors", ec);
}

TrainingSnapshot load_training_checkpoint(const fs::path& dir) {
  if (auto problem = checkpoint_problem(dir))
    throw data_error("checkpoint '" + dir.string() + "' is not usable: " + *problem +
                     "\n    fix: resume from another checkpoint (checkpoint.resume: auto picks the newest complete one)");
  TrainingSnapshot s;
  const fs::path state_path = dir / "trainer.json";
  try {
    const json j = json::parse(read_text(state_path));
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
  } catch (const json::exception& e) {
    throw data_error("'" + state_path.string() + "' is malformed: " + e.what() +
                     "\n    fix: resume from another checkpoint");
  }
  s.recipe_yaml = read_text(dir / "recipe.yaml");
  s.model = read_safetensors((dir / "model.safetensors").string()).tensors;
  s.optimizer_state = read_safetensors((dir / "optimizer.safetensors").string()).tensors;
  const SafetensorsFile rng = read_safetensors((dir / "rng.safetensors").string());
  const torch::Tensor* cpu = rng.find("cpu");
  if (!cpu) throw data_error("'" + (dir / "rng.safetensors").string() + "' has no 'cpu' generator state");
  s.rng.cpu = *cpu;
  if (const torch::Tensor* cuda = rng.find("cuda")) s.rng.cuda = *cuda;
  return s;
}

}  // namespace gputrain
