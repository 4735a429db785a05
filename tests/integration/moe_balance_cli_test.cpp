// model.moe.balance: bias (DeepSeek-V3's auxiliary-loss-free balancing) end to end: it evens the experts'
// loads where nothing else does, the loads are summed over every rank (2 processes are 1), and the
// biases travel in checkpoints (a resumed run is the uninterrupted one, also from a pipeline's).
#include <catch2/catch.hpp>

#include <ATen/ATen.h>

#include <cmath>
#include <cstdio>
#include <numeric>

#include "checkpoint/safetensors.h"
#include "parallel_runs.h"
#include "test_util.h"

using namespace gputrain;
using namespace gputrain::test;
using Catch::Contains;

namespace {

// The mean of metrics.jsonl's moe_load_max_mean over its last `n` lines.
double last_load_ratio(const std::string& out, size_t n) {
  const std::vector<double> v = column(out, "moe_load_max_mean");
  REQUIRE(v.size() >= n);
  return std::accumulate(v.end() - static_cast<long>(n), v.end(), 0.0) / static_cast<double>(n);
}

}  // namespace

TEST_CASE("moe: routing biases even the experts' loads without a balancing loss", "[cli][moe]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), "run: {name: moe, threads: 2}\n" + tiny_shakespeare_model_and_data() +
                                     "train: {per_device_batch_size: 8, max_steps: 100, log_every: 1, eval_steps: 8}\n"
                                     "optim: {lr: 3e-3, schedule: {warmup_steps: 10}}\nmetrics: {progress: off}\n");
  const std::vector<std::string> experts = {"model.moe.experts=8", "model.moe.top_k=2", "model.moe.capacity_factor=0"};
  auto run = [&](const std::string& name, const std::vector<std::string>& sets) {
    const CommandResult r = train(dir.file("r.yaml"), dir.file(name), 0, with(experts, sets));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    return read_json(dir.file(name) + "/summary.json");
  };
  const auto none = run("none", {"model.moe.aux_loss_coef=0"});
  const auto bias = run("bias", {"model.moe.balance=bias"});
  CHECK(bias["moe"]["balance"] == "bias");
  // Unbalanced, this router sends nearly every token to the same 2 of 8 experts (4 = the busiest
  // expert's load over the mean when collapsed); the bias spreads them (measured 3.97 and 3.45 over
  // the last 40 steps). The loss stays the same model's.
  CHECK(last_load_ratio(dir.file("none"), 40) > 3.8);
  CHECK(last_load_ratio(dir.file("bias"), 40) < last_load_ratio(dir.file("none"), 40) - 0.3);
  CHECK(std::abs(bias["eval_loss"].get<double>() - none["eval_loss"].get<double>()) < 0.1);
  CHECK(bias["moe"]["load_max_mean"].get<double>() < none["moe"]["load_max_mean"].get<double>());
}

TEST_CASE("moe: the experts' loads are summed over every rank, and the biases resume exactly, also from a pipeline",
          "[cli][moe][parallel][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  // A rate large enough that the biases change choices within a few steps.
  const std::vector<std::string> sets = {"model.moe.experts=4",         "model.moe.top_k=2",
                                         "model.moe.capacity_factor=0", "model.moe.balance=bias",
                                         "model.moe.bias_rate=0.02",    "checkpoint.every=10"};
  const CommandResult one = train(dir.file("r.yaml"), dir.file("one"), 0, sets);
  INFO(one.output);
  REQUIRE(one.exit_code == 0);
  const auto loss1 = column(dir.file("one"), "loss"), norm1 = column(dir.file("one"), "grad_norm");
  const nlohmann::json saved = read_json(dir.file("one") + "/checkpoints/step_00000020/trainer.json");
  REQUIRE(saved["moe_expert_bias"].size() == 2);
  CHECK(saved["moe_expert_bias"]["transformer.h.1.mlp"].size() == 4);

  const std::vector<std::string> halves = with(sets, {"train.per_device_batch_size=2"});
  train_like_one_process(dir, dir.file("r.yaml"), Variant{"dp2", halves}, loss1, norm1, 1e-5);
  train_like_one_process(dir, dir.file("r.yaml"), Variant{"ep2", with(halves, {"parallel.ep=2"})}, loss1, norm1, 1e-5);
  const std::vector<std::string> pp2 =
      with(sets, {"parallel.pp=2", "train.per_device_batch_size=1", "train.grad_accum_steps=4"});
  train_like_one_process(dir, dir.file("r.yaml"), Variant{"pp2", pp2}, loss1, norm1, 1e-5);
  // Rank 0 holds the first stage's layer only, and its checkpoint both layers' biases.
  CHECK(read_json(dir.file("pp2") + "/checkpoints/step_00000020/trainer.json")["moe_expert_bias"] ==
        saved["moe_expert_bias"]);

  train_resumed(dir.file("r.yaml"), dir.file("resumed"), 0,
                with_resume(sets, dir.file("one") + "/checkpoints/step_00000010"), loss1, 10, 0);
  train_resumed(dir.file("r.yaml"), dir.file("from-pp2"), 0,
                with_resume(sets, dir.file("pp2") + "/checkpoints/step_00000010"), loss1, 10, 1e-5);
}

TEST_CASE("moe: gputrain eval of a checkpoint routes with the biases the run reached", "[cli][moe][eval]") {
  TempDir dir;
  const std::string text = shared_data("tinyshakespeare.txt");
  write_file(dir.file("r.yaml"),
             "run: {name: moe, threads: 2}\n"
             "model: {vocab_size: 256, seq_len: 64, n_layer: 2, n_head: 4, d_model: 64,\n"
             "        moe: {experts: 8, top_k: 2, capacity_factor: 0, balance: bias, bias_rate: 0.02}}\n"
             "data:\n  train: {format: text, path: " +
                 text + ", span: [0.0, 0.9]}\n  eval: {format: text, path: " + text +
                 ", span: [0.9, 0.91]}\n"
                 "train: {per_device_batch_size: 8, max_steps: 30, log_every: 10, eval_full: true}\n"
                 "optim: {lr: 3e-3}\nmetrics: {progress: off}\n");
  const CommandResult r = train(dir.file("r.yaml"), dir.file("run"), 0, {});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  // The biases are far from zero, so routing without them would differ; evaluated again from the
  // checkpoint, the loss is the run's own last evaluation.
  const nlohmann::json biases =
      read_json(dir.file("run") + "/checkpoints/step_00000030/trainer.json")["moe_expert_bias"];
  double spread = 0;
  for (const auto& [layer, values] : biases.items())
    for (const auto& v : values) spread = std::max(spread, std::abs(v.get<double>() - values[0].get<double>()));
  CHECK(spread > 0.05);
  const double trained = read_json(dir.file("run") + "/summary.json")["eval_loss"].get<double>();
  const nlohmann::json again = eval_json(dir, shell_quoted(dir.file("run")));
  CHECK(trained == Approx(again["loss"].get<double>()).epsilon(1e-5));
}

namespace {

// Each mixture layer's routing biases after every step of `out`'s run (trainer.json of a checkpoint
// saved at each step), by step.
std::vector<nlohmann::json> biases_by_step(const std::string& out, int steps) {
  std::vector<nlohmann::json> by_step;
  for (int s = 1; s <= steps; ++s) {
    char name[32];
    std::snprintf(name, sizeof name, "step_%08d", s);
    by_step.push_back(read_json(out + "/checkpoints/" + name + "/trainer.json")["moe_expert_bias"]);
  }
  return by_step;
}

// A tiny mixture model on text with the routing biases at `rate`, a checkpoint after every step.
std::vector<std::string> bias_run_sets(double rate, int steps) {
  return {"model.moe.experts=4",
          "model.moe.top_k=2",
          "model.moe.capacity_factor=0",
          "model.moe.balance=bias",
          "model.moe.bias_rate=" + std::to_string(rate),
          "checkpoint.every=1",
          "checkpoint.keep_last=0",
          "train.max_steps=" + std::to_string(steps)};
}

// The same layers' biases, all zero.
nlohmann::json zero_biases(nlohmann::json like) {
  for (auto& [layer, values] : like.items())
    for (auto& v : values) v = 0.0;
  return like;
}

// One applied step from `before` to `after`: every bias moved by sign(mean load - load) x rate, that is
// +rate, -rate or (a load exactly at the mean) not at all; since the loads sum to the step's choices,
// some went up and some down in every layer.
void check_moved_by_rate(const nlohmann::json& before, const nlohmann::json& after, double rate) {
  REQUIRE(after.size() == before.size());
  for (const auto& [layer, values] : after.items()) {
    INFO(layer << " " << before[layer].dump() << " -> " << values.dump());
    int up = 0, down = 0;
    for (size_t e = 0; e < values.size(); ++e) {
      const double moved = values[e].get<double>() - before[layer][e].get<double>();
      const bool is_up = std::abs(moved - rate) < 1e-6, is_down = std::abs(moved + rate) < 1e-6;
      CHECK((is_up || is_down || std::abs(moved) < 1e-9));
      up += is_up, down += is_down;
    }
    CHECK(up >= 1);
    CHECK(down >= 1);
  }
}

// No evaluation: a run whose every loss is NaN (below) would stop at it.
void write_bias_recipe(const TempDir& dir) {
  write_file(dir.file("r.yaml"),
             "run: {name: moe, threads: 2}\n"
             "model: {vocab_size: 256, seq_len: 64, n_layer: 2, n_head: 4, d_model: 64}\n"
             "data: {train: {format: text, path: " +
                 shared_data("tinyshakespeare.txt") +
                 "}}\n"
                 "train: {per_device_batch_size: 4, log_every: 1}\n"
                 "optim: {lr: 3e-3}\nmetrics: {progress: off}\n");
}

}  // namespace

TEST_CASE("moe: each applied step moves every routing bias by exactly model.moe.bias_rate, up or down", "[cli][moe]") {
  TempDir dir;
  write_bias_recipe(dir);
  // An uncommon rate, so a rate taken from elsewhere (the default 0.001, another key) shows.
  const double rate = 0.0371;
  const int steps = 4;
  const CommandResult r = train(dir.file("r.yaml"), dir.file("run"), 0, bias_run_sets(rate, steps));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const std::vector<nlohmann::json> biases = biases_by_step(dir.file("run"), steps);
  for (int s = 0; s < steps; ++s) {
    INFO("step " << s + 1);
    check_moved_by_rate(s == 0 ? zero_biases(biases[0]) : biases[static_cast<size_t>(s - 1)],
                        biases[static_cast<size_t>(s)], rate);
  }
}

TEST_CASE("moe: steps that the fp16 loss scaler or the NaN guard skip leave the routing biases where they were",
          "[cli][moe]") {
  TempDir dir;
  write_bias_recipe(dir);
  const double rate = 0.02;
  SECTION("fp16 overflow") {
    // A first loss scale past float32's range overflows step 1 (and only it: the back-off brings it to
    // 1e4); the routing is finite, so the step's loads are real.
    const int steps = 3;
    const CommandResult r = train(dir.file("r.yaml"), dir.file("fp16"), 0,
                                  with(bias_run_sets(rate, steps), {"precision.mode=fp16", "precision.init_scale=1e38",
                                                                    "precision.backoff_factor=1e-34"}));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const std::vector<nlohmann::json> lines = read_jsonl(dir.file("fp16") + "/metrics.jsonl");
    REQUIRE(lines.size() == 3);
    CHECK(lines[0]["skipped_steps"] == 1);
    CHECK(lines[2]["skipped_steps"] == 1);
    const std::vector<nlohmann::json> biases = biases_by_step(dir.file("fp16"), steps);
    CHECK(biases[0] == zero_biases(biases[0]));
    // The steps after it were applied and moved them.
    check_moved_by_rate(biases[0], biases[1], rate);
    check_moved_by_rate(biases[1], biases[2], rate);
  }
  SECTION("a non-finite loss under train.nan_policy: skip") {
    // The final norm poisoned (after the mixture layers): routing and loads are real, every loss NaN.
    REQUIRE(train(dir.file("r.yaml"), dir.file("w"), 0, bias_run_sets(rate, 1)).exit_code == 0);
    SafetensorsFile w = read_safetensors(dir.file("w") + "/checkpoints/step_00000001/model.safetensors");
    at::Tensor norm = *w.find("transformer.ln_f.weight");
    norm.view(-1)[3] = NAN;
    write_safetensors(dir.file("nan.safetensors"), w.tensors, w.metadata);
    const int steps = 3;
    const CommandResult r = train(
        dir.file("r.yaml"), dir.file("skip"), 0,
        with(bias_run_sets(rate, steps), {"model.init_from=" + dir.file("nan.safetensors"), "train.nan_policy=skip"}));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK(read_json(dir.file("skip") + "/summary.json")["skipped_steps"] == steps);
    for (const nlohmann::json& step : biases_by_step(dir.file("skip"), steps)) CHECK(step == zero_biases(step));
  }
}
