// Optimizers end to end: each optim.name lowers the loss on real text, and
// the recipe checks around them (settings of another optimizer, Nesterov's
// conditions, the kernel fallback notice, the plan's state estimate).
#include <catch2/catch.hpp>

#include "test_util.h"

using namespace gputrain::test;
using Catch::Matchers::Contains;

namespace {

const std::string kText = "run: {name: optim, threads: 2}\n" + tiny_shakespeare_model_and_data() +
                          "train: {per_device_batch_size: 8, max_steps: 60, log_every: 20, eval_steps: 8}\n"
                          "optim: {lr: 3e-3, schedule: {warmup_steps: 10}}\n"
                          "metrics: {progress: off}\n";

}  // namespace

TEST_CASE("cli: every optimizer lowers the loss on tinyshakespeare", "[cli][optim]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), kText);
  // Lion wants a smaller lr and a larger weight decay; SGD and Muon a much larger lr.
  const std::vector<std::vector<std::string>> runs = {{"adamw"},
                                                      {"adamw", "optim.impl=foreach"},
                                                      {"adamw8bit", "optim.adamw8bit.min_8bit_size=1024"},
                                                      {"adafactor"},
                                                      {"adafactor", "optim.adafactor.beta1=0.9"},
                                                      {"lion", "optim.lr=2e-3", "optim.weight_decay=0.3"},
                                                      {"sgd", "optim.lr=0.3", "optim.sgd.nesterov=true"},
                                                      {"muon", "optim.lr=0.02", "optim.muon.adamw.lr=3e-3"}};
  for (const auto& run : runs) {
    std::vector<std::string> args = {"run",   dir.file("r.yaml"),    "--output-dir", dir.file("out"), "--overwrite",
                                     "--set", "optim.name=" + run[0]};
    for (size_t i = 1; i < run.size(); ++i) args.push_back("--set"), args.push_back(run[i]);
    auto r = run_gputrain(args);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.output, !Contains("has no effect"));
    auto lines = read_jsonl(dir.file("out") + "/metrics.jsonl");
    auto summary = read_json(dir.file("out") + "/summary.json");
    CHECK_THAT(summary["optimizer"].get<std::string>(), Contains(run[0] + ", "));
    // The resolved recipe spells out every optimizer's keys at their defaults: no warnings.
    auto again = run_gputrain({"validate", dir.file("out") + "/recipe.resolved.yaml"});
    CHECK(again.exit_code == 0);
    CHECK_THAT(again.output, !Contains("has no effect"));
    // ln(256) = 5.55 at the start; 60 steps take every optimizer below 3.6 here
    // (measured 3.19-3.32, adafactor 2.83, muon 2.77).
    CHECK(lines.back()["loss_avg"].get<double>() < lines.front()["loss_avg"].get<double>() - 0.5);
    CHECK(summary["eval_loss"].get<double>() < 3.6);
  }
}

TEST_CASE("cli: optimizer settings are checked against optim.name", "[cli][optim]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), kText);
  auto r = run_gputrain({"validate", dir.file("r.yaml"), "--set", "optim.lion.betas=[0.95, 0.98]"});
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("optim.lion.betas: has no effect with optim.name: adamw"));
  r = run_gputrain({"validate", dir.file("r.yaml"), "--set", "optim.name=sgd", "--set", "optim.sgd.momentum=0", "--set",
                    "optim.sgd.nesterov=true"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Contains("optim.sgd.nesterov: needs momentum > 0 and dampening 0 (momentum 0.0"));
  r = run_gputrain({"validate", dir.file("r.yaml"), "--set", "optim.name=adam"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Contains("did you mean 'adamw'?"));
  r = run_gputrain({"run", dir.file("r.yaml"), "--output-dir", dir.file("o"), "--set", "optim.name=lion", "--set",
                    "optim.impl=fused", "--set", "train.max_steps=1", "--set", "optim.schedule.warmup_steps=0"});
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("optim.impl: fused: lion has no fused kernel; using foreach"));
}

TEST_CASE("cli: the plan's optimizer state follows optim.name", "[cli][optim]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), kText);
  auto state_mib = [&](const std::string& name) {
    auto r = run_gputrain({"plan", dir.file("r.yaml"), "--set", "optim.name=" + name, "--set", "model.d_model=256",
                           "--set", "model.n_layer=4"});
    REQUIRE(r.exit_code == 0);
    const auto at = r.output.find("| optimizer state | ");
    REQUIRE(at != std::string::npos);
    return std::stod(r.output.substr(at + 20));
  };
  const double adamw = state_mib("adamw");
  CHECK(state_mib("lion") == Approx(adamw / 2).epsilon(0.02));
  CHECK(state_mib("adamw8bit") < adamw / 3);
  CHECK(state_mib("adafactor") < adamw / 20);
  // Muon: half of AdamW's for the hidden matrices, AdamW's for the embedding and the rest.
  const double muon = state_mib("muon");
  CHECK(muon > adamw / 2);
  CHECK(muon < adamw * 0.75);
}

TEST_CASE("cli: optim bench times every optimizer, and fused AdamW with bf16 weight copies", "[cli][optim]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), kText);
  auto fp32 = run_gputrain({"optim", "bench", dir.file("r.yaml"), "--steps", "2"});
  INFO(fp32.output);
  REQUIRE(fp32.exit_code == 0);
  for (const char* row : {"| adamw | foreach", "| adamw | fused", "| adamw8bit | fused", "| adafactor |", "| lion |",
                          "| sgd |", "| torch::optim::AdamW |"})
    CHECK_THAT(fp32.output, Contains(row));
  // The copies live beside the weights, not in the optimizer state: the same 8 bytes per parameter.
  CHECK_THAT(fp32.output, Contains("+ bf16 weight copies | 8.00 |"));
  // bf16 weights have no fp32 master to copy from.
  auto bf16 = run_gputrain({"optim", "bench", dir.file("r.yaml"), "--steps", "2", "--set", "precision.mode=bf16-pure"});
  INFO(bf16.output);
  REQUIRE(bf16.exit_code == 0);
  CHECK_THAT(bf16.output, Contains("| adamw | fused"));
  CHECK_THAT(bf16.output, !Contains("weight copies"));
}
