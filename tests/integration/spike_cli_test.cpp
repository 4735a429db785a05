// train.spike_policy through the binary, with a poisoned batch injected at a chosen step
// (GPUTRAIN_POISON_STEPS: its targets replaced by random ids): skip drops exactly that update,
// rollback restores the last checkpoint's weights and optimizer state bit for bit (one process,
// ZeRO-1 and 3, tensor, pipeline and expert parallelism), the rollbacks are capped, and each event is logged, counted
// in metrics.jsonl and kept in the summary.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <map>
#include <regex>

#include "test_util.h"

using namespace gputrain::test;
using Catch::Matchers::Contains;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// A tiny GPT on real text; the guard judges after 10 steps. `extra` adds train keys.
std::string write_recipe(const TempDir& dir, const std::string& train_extra, const std::string& checkpoint) {
  std::string r = "run: {name: spike, threads: 2}\n";
  r.append("model: {vocab_size: 256, seq_len: 32, n_layer: 1, n_head: 2, d_model: 32}\n");
  r.append("data:\n  train: {format: text, path: ")
      .append(shared_data("tinyshakespeare.txt"))
      .append(", span: [0.0, 0.05]}\n");
  r.append("train: {per_device_batch_size: 8, max_steps: 24, log_every: 1, spike_window: 10, spike_threshold: 6");
  r.append(train_extra).append("}\n");
  r.append("optim: {lr: 3e-3, schedule: {warmup_steps: 2, decay_steps: 40}}\n");
  r.append("checkpoint: ").append(checkpoint).append("\nmetrics: {progress: off}\n");
  write_file(dir.file("r.yaml"), r);
  return dir.file("r.yaml");
}

CommandResult run_poisoned(const std::string& recipe, const std::string& out, const std::string& steps,
                           const std::string& sets = "") {
  return run_shell("GPUTRAIN_POISON_STEPS=" + steps + " \"$GPUTRAIN\" run '" + recipe + "' --output-dir '" + out +
                   "' " + sets);
}

std::string checkpoint_file(const std::string& run, int step, const std::string& file) {
  char name[32];
  std::snprintf(name, sizeof name, "step_%08d", step);
  return read_file(run + "/checkpoints/" + name + "/" + file);
}

json line_of_step(const std::string& run, int64_t step) {
  for (const json& l : read_jsonl(run + "/metrics.jsonl"))
    if (l["step"] == step) return l;
  FAIL("no metrics line for step " << step);
  return {};
}

// The guard's score of `key` at `step` computed here from metrics.jsonl: how many (population) standard
// deviations, floored at 1% of the mean, it lies above the mean of the 10 steps before (spike_window).
double z_score(const std::string& run, int64_t step, const char* key) {
  std::vector<double> window;
  for (int64_t s = step - 10; s < step; ++s) window.push_back(line_of_step(run, s)[key].get<double>());
  double mean = 0, var = 0;
  for (double v : window) mean += v / 10;
  for (double v : window) var += (v - mean) * (v - mean) / 10;
  return (line_of_step(run, step)[key].get<double>() - mean) / std::max(std::sqrt(var), 0.01 * mean);
}

// The input rows each step trained on (GPUTRAIN_TRACE_BATCHES, train/batch_trace.h), by step.
std::map<int64_t, json> inputs_by_step(const std::string& trace) {
  std::map<int64_t, json> by_step;
  for (const json& l : traced_batches(trace)) by_step[l["step"].get<int64_t>()] = l["input"];
  return by_step;
}

}  // namespace

TEST_CASE("spike: skip drops exactly the poisoned step's update, and off applies it", "[spike][cli]") {
  TempDir dir;
  const std::string every_step = "{every: 1, keep_last: 0}";
  const std::string skip = dir.file("skip"), off = dir.file("off");
  auto r = run_poisoned(write_recipe(dir, ", spike_policy: skip", every_step), skip, "23");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("step 23: loss spike") && Contains("update skipped"));
  for (const char* f : {"model.safetensors", "optimizer.safetensors"}) {
    INFO(f);
    CHECK(checkpoint_file(skip, 23, f) == checkpoint_file(skip, 22, f));  // the update of step 23 was dropped
    CHECK(checkpoint_file(skip, 24, f) != checkpoint_file(skip, 23, f));  // and step 24's applied
  }
  CHECK(line_of_step(skip, 23)["spike_skipped_steps"] == 1);
  CHECK_FALSE(line_of_step(skip, 22).contains("spike_skipped_steps"));
  const json spikes = read_json(skip + "/summary.json")["spikes"];
  CHECK(spikes["policy"] == "skip");
  CHECK(spikes["skipped_steps"] == 1);
  REQUIRE(spikes["events"].size() == 1);
  CHECK(spikes["events"][0]["step"] == 23);
  // The scores it reports are the ones the logged losses and gradient norms give.
  CHECK(spikes["events"][0]["loss_z"].get<double>() == Approx(z_score(skip, 23, "loss")).margin(0.01));
  CHECK(spikes["events"][0]["grad_norm_z"].get<double>() == Approx(z_score(skip, 23, "grad_norm")).margin(0.01));
  CHECK(spikes["events"][0]["loss_z"].get<double>() > 6);

  // The same poison without the guard: the update goes in, nothing is reported.
  auto o = run_poisoned(write_recipe(dir, "", every_step), off, "23");
  INFO(o.output);
  REQUIRE(o.exit_code == 0);
  CHECK(checkpoint_file(off, 23, "model.safetensors") != checkpoint_file(off, 22, "model.safetensors"));
  CHECK_FALSE(read_json(off + "/summary.json").contains("spikes"));
  // Unpoisoned steps train identically under both (the guard itself changes nothing).
  CHECK(checkpoint_file(off, 22, "model.safetensors") == checkpoint_file(skip, 22, "model.safetensors"));
}

TEST_CASE("spike: rollback restores the last checkpoint's weights and optimizer state, and is capped", "[spike][cli]") {
  TempDir dir;
  const std::string recipe =
      write_recipe(dir, ", spike_policy: rollback, spike_max_rollbacks: 1", "{every: 10, keep_last: 0}");
  const std::string run = dir.file("run");
  auto r =
      run_poisoned(recipe, run, "23", "--set train.max_steps=23");  // the checkpoint at the end is the rollback's state
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("step 23: loss spike") && Contains("rolled back to the checkpoint of step 20"));
  for (const char* f : {"model.safetensors", "optimizer.safetensors"}) {
    INFO(f);
    CHECK(checkpoint_file(run, 23, f) == checkpoint_file(run, 20, f));
  }
  CHECK(line_of_step(run, 23)["spike_rollbacks"] == 1);
  const json spikes = read_json(run + "/summary.json")["spikes"];
  CHECK(spikes["rollbacks"] == 1);
  CHECK(spikes["events"][0]["rolled_back_to"] == 20);

  // After the rollback the run trains on the data after the spike (steps 24 to 26 read what an
  // unpoisoned run reads there), not on the data since the checkpoint again.
  const std::string traced = dir.file("traced"), plain = dir.file("plain");
  auto t =
      run_traced(dir.file("trace-rollback"), {"run", recipe, "--output-dir", traced, "--set", "train.max_steps=26"},
                 "GPUTRAIN_POISON_STEPS=23");
  INFO(t.output);
  REQUIRE(t.exit_code == 0);
  CHECK_THAT(t.output, Contains("rolled back to the checkpoint of step 20"));
  auto p = run_traced(dir.file("trace-plain"), {"run", recipe, "--output-dir", plain, "--set", "train.max_steps=26"});
  INFO(p.output);
  REQUIRE(p.exit_code == 0);
  const auto fed = inputs_by_step(dir.file("trace-rollback")), plain_fed = inputs_by_step(dir.file("trace-plain"));
  REQUIRE(fed.size() == 26);
  REQUIRE(plain_fed.size() == 26);
  for (int64_t step = 21; step <= 26; ++step) {
    INFO("step " << step);
    CHECK(fed.at(step) == plain_fed.at(step));
  }
  CHECK(fed.at(24) != fed.at(21));  // a rewound loader would read step 21's batch again here
  // It went on from the checkpoint's weights: step 24's loss differs from the unpoisoned run's.
  CHECK(line_of_step(traced, 24)["loss"] != line_of_step(plain, 24)["loss"]);

  // Two data-parallel processes with ZeRO-1 (each holds a share of the optimizer state) agree and roll back alike.
  const std::string zero = dir.file("zero");
  auto z = run_poisoned(recipe, zero, "23", "--set train.max_steps=23 --set parallel.zero=1 --nproc-per-node 2");
  INFO(z.output);
  REQUIRE(z.exit_code == 0);
  CHECK_THAT(z.output, Contains("[rank 1]") && Contains("rolled back to the checkpoint of step 20"));
  for (const char* f : {"model.rank0.safetensors", "optimizer.rank0.safetensors", "optimizer.rank1.safetensors"}) {
    INFO(f);
    CHECK(checkpoint_file(zero, 23, f) == checkpoint_file(zero, 20, f));
  }
  // Only rank 0 writes the run's files: one TensorBoard event file.
  CHECK(std::distance(fs::directory_iterator(zero + "/tensorboard"), fs::directory_iterator()) == 1);
  // ZeRO-3: each rank reads its rows of the checkpoint's weights and state back into its shards, and
  // no more of the weights' bytes than its rows (a wider model: the log counts tenths of a MiB; its
  // early gradient norms may count as spikes too, hence more rollbacks allowed).
  const std::string zero3 = dir.file("zero3");
  auto z3 = run_poisoned(recipe, zero3, "23",
                         "--set train.max_steps=23 --set parallel.zero=3 --nproc-per-node 2 --set model.d_model=256 "
                         "--set model.n_head=4 --set train.spike_max_rollbacks=3");
  INFO(z3.output);
  REQUIRE(z3.exit_code == 0);
  CHECK_THAT(z3.output, Contains("rolled back to the checkpoint of step 20"));
  std::smatch read;
  REQUIRE(
      std::regex_search(z3.output, read,
                        std::regex(R"(the 2 ranks read ([0-9.]+), ([0-9.]+) MiB of the ([0-9.]+) MiB of weights in )"
                                   R"(checkpoint \S*step_00000020)")));
  CHECK(std::stod(read[3]) > 3);
  for (int r : {1, 2}) CHECK(std::stod(read[r]) < 0.6 * std::stod(read[3]));
  for (const char* f : {"model.rank0.safetensors", "model.rank1.safetensors", "optimizer.rank0.safetensors",
                        "optimizer.rank1.safetensors"}) {
    INFO(f);
    CHECK(checkpoint_file(zero3, 23, f) == checkpoint_file(zero3, 20, f));
  }

  // With the state and the fp32 shards in files (nvme under bf16) the rollback writes the shards there
  // and sets their bf16 copies, which the gathers read, again: the steps after it are the in-memory run's.
  // (How many early bf16 steps also count as spikes depends on the CPU's bf16 arithmetic: 3 on some
  // machines, so rollbacks are not capped here; both runs must make the same ones.)
  const std::string bf16 =
      "--set train.max_steps=26 --set parallel.zero=3 --nproc-per-node 2 --set model.d_model=256 "
      "--set model.n_head=4 --set train.spike_max_rollbacks=10 --set precision.mode=bf16";
  auto in_memory = run_poisoned(recipe, dir.file("bf16-memory"), "23", bf16);
  auto filed = run_poisoned(recipe, dir.file("bf16-nvme"), "23", bf16 + " --set parallel.offload_optimizer=nvme");
  INFO(in_memory.output << filed.output);
  REQUIRE(in_memory.exit_code == 0);
  REQUIRE(filed.exit_code == 0);
  CHECK_THAT(filed.output,
             Contains("and the fp32 weight shards") && Contains("rolled back to the checkpoint of step 20"));
  for (int64_t step = 20; step <= 26; ++step) {
    INFO("step " << step);
    CHECK(line_of_step(dir.file("bf16-nvme"), step)["loss"] == line_of_step(dir.file("bf16-memory"), step)["loss"]);
  }

  // A second spike past train.spike_max_rollbacks (1) stops the run, saying what to do.
  auto capped = run_poisoned(recipe, dir.file("capped"), "22,24");
  INFO(capped.output);
  CHECK(capped.exit_code == 1);
  CHECK_THAT(capped.output, Contains("after 1 rollbacks") && Contains("train.spike_max_rollbacks") && Contains("fix:"));
  CHECK(read_json(dir.file("capped/summary.json"))["status"] == "failed");

  // Before the first checkpoint there is nothing to roll back to: the update is skipped.
  auto early = run_poisoned(recipe, dir.file("early"), "19", "--set checkpoint.every=20");
  INFO(early.output);
  REQUIRE(early.exit_code == 0);
  CHECK_THAT(early.output, Contains("no checkpoint yet to roll back to"));
  CHECK(read_json(dir.file("early/summary.json"))["spikes"]["skipped_steps"] == 1);
}

TEST_CASE("spike: rollback puts back a mixture's routing biases with the weights", "[spike][cli]") {
  TempDir dir;
  const std::string recipe =
      write_recipe(dir, ", spike_policy: rollback, spike_max_rollbacks: 5", "{every: 10, keep_last: 0}");
  const std::string run = dir.file("run");
  auto r = run_poisoned(recipe, run, "22",
                        "--set train.max_steps=22 --set model.moe.experts=4 --set model.moe.top_k=2 "
                        "--set model.moe.balance=bias --set model.moe.bias_rate=0.01");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("rolled back to the checkpoint of step 20"));
  const json back = json::parse(checkpoint_file(run, 22, "trainer.json"))["moe_expert_bias"];
  const json saved = json::parse(checkpoint_file(run, 20, "trainer.json"))["moe_expert_bias"];
  CHECK(back.size() == 1);
  // Not where step 21 moved them (the spike at 22, one step after the checkpoint: near balance the
  // biases move by +-rate each step, so two steps may well cancel out).
  CHECK(back == saved);
  CHECK(checkpoint_file(run, 22, "model.safetensors") == checkpoint_file(run, 20, "model.safetensors"));
}

TEST_CASE("spike: rollback under tensor, pipeline and expert parallelism and LoRA puts back each rank's part",
          "[spike][cli]") {
  TempDir dir;
  const std::string recipe =
      write_recipe(dir, ", spike_policy: rollback, spike_max_rollbacks: 1", "{every: 10, keep_last: 0}");
  const std::string experts =
      "--set model.moe.experts=4 --set model.moe.top_k=2 --set model.moe.capacity_factor=0 --set parallel.ep=2";
  for (const auto& [name, sets] :
       std::vector<std::pair<std::string, std::string>>{{"tp2", "--set parallel.tp=2"},
                                                        {"pp2", "--set parallel.pp=2 --set model.n_layer=2"},
                                                        {"ep2", experts},
                                                        {"ep2-zero3", experts + " --set parallel.zero=3"},
                                                        // LoRA saving adapters alone: they come back, the base stays
                                                        // (a higher lr and a lower threshold make step 23 a spike).
                                                        {"lora-zero3",
                                                         "--set model.lora.rank=4 --set parallel.zero=3 --set "
                                                         "optim.lr=3e-2 --set train.spike_threshold=1.5"}}) {
    INFO(name);
    const std::string run = dir.file(name);
    // (A mixture's router can make a gradient-norm spike of its own before step 23: rollbacks allowed for it.)
    auto r = run_poisoned(recipe, run, "23",
                          "--set train.max_steps=23 --set train.spike_max_rollbacks=5 --nproc-per-node 2 " + sets);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.output, Contains("step 23: loss spike") && Contains("rolled back to the checkpoint of step 20"));
    // Every rank's weights and optimizer state at the end are the checkpoint's, bit for bit (the
    // rolled-back step's update dropped too).
    int files = 0;
    for (const auto& f : fs::directory_iterator(run + "/checkpoints/step_00000020")) {
      const std::string file = f.path().filename().string();
      if (file.rfind("model.", 0) != 0 && file.rfind("optimizer.", 0) != 0) continue;
      INFO(file);
      CHECK(checkpoint_file(run, 23, file) == checkpoint_file(run, 20, file));
      ++files;
    }
    CHECK(files == 4);  // model and optimizer of each of the 2 ranks
    const json events = read_json(run + "/summary.json")["spikes"]["events"];
    REQUIRE(!events.empty());
    CHECK(events.back()["step"] == 23);
    CHECK(events.back()["rolled_back_to"] == 20);
  }
}

TEST_CASE("spike: a bad poison list is a usage error", "[spike][cli]") {
  TempDir dir;
  const std::string recipe = write_recipe(dir, ", spike_policy: rollback", "{every: 10}");
  auto bad = run_poisoned(recipe, dir.file("bad"), "x");
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.output, Contains("GPUTRAIN_POISON_STEPS"));
}
