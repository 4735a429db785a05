// Single-device techniques end to end: precision modes track fp32 on real
// text, the memory plan matches measured CPU peaks within its stated margin,
// and batch size auto reports its choice.
#include <catch2/catch.hpp>

#include <cmath>
#include <iostream>
#include <map>

#include "test_util.h"

using namespace gputrain::test;
using Catch::Matchers::Contains;

namespace {

const std::string kMem =
    "run: {name: mem, threads: 2}\n"
    "model: {vocab_size: 8192, seq_len: 256, n_layer: 4, n_head: 4, d_model: 256}\n"
    "data: {train: {format: synthetic, synthetic: {kind: uniform}}}\n"
    "train: {per_device_batch_size: 8, max_steps: 3, log_every: 1}\n"
    "metrics: {progress: off}\n";

double plan_total(const std::string& recipe, const std::vector<std::string>& sets) {
  std::vector<std::string> args{"plan", recipe};
  for (const auto& s : sets) args.push_back("--set"), args.push_back(s);
  auto r = run_gputrain(args);
  REQUIRE(r.exit_code == 0);
  const auto at = r.output.find("| total (estimate) | ");
  REQUIRE(at != std::string::npos);
  return std::stod(r.output.substr(at + 21));
}

}  // namespace

TEST_CASE("cli: bf16, fp16 and bf16-pure losses track fp32 on real text, bf16-pure on average over seeds",
          "[cli][precision][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), precision_reference_recipe());
  std::map<std::string, std::vector<nlohmann::json>> lines;
  for (std::string mode : {"fp32", "bf16", "fp16", "bf16-pure"}) {
    auto r =
        run_gputrain({"run", dir.file("r.yaml"), "--output-dir", dir.file(mode), "--set", "precision.mode=" + mode});
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    lines[mode] = read_jsonl(dir.file(mode) + "/metrics.jsonl");
    const auto summary = read_json(dir.file(mode) + "/summary.json");
    CHECK(summary["precision"] == mode);
    // bf16 mixed with the fused AdamW keeps bf16 copies of the 8 Linear weights and the tied head.
    CHECK(summary.contains("bf16_weight_copies") == (mode == "bf16"));
    if (mode == "bf16") {
      CHECK(summary["bf16_weight_copies"]["tensors"] == 9);
      CHECK_THAT(r.output, Contains("bf16 weight copies: 9 weights"));
    }
  }
  CHECK(lines["fp16"].back().contains("loss_scale"));
  // Dynamic scaling starts at 65536 and may skip a step or two while it finds its scale (as
  // PyTorch's GradScaler does); more would mean it keeps overflowing.
  CHECK(lines["fp16"].back()["skipped_steps"].get<int>() <= 2);
  CHECK_FALSE(lines["bf16"].back().contains("loss_scale"));
  check_precisions_track_fp32(lines);
  CHECK(lines["fp32"].back()["loss_avg"].get<double>() < lines["fp32"].front()["loss_avg"].get<double>() - 1.0);

  // bf16-pure over 4 more seeds: one seed's lag swings with its draws (0.24 at step 40 on one, -0.09 on
  // another), the mean over seeds does not. Measured (2026-12-08): the first 20 steps' mean loss lags
  // fp32 by 0.0003 on average (each seed at most 0.0007), the final eval loss by 0.0105; rounding to
  // nearest instead of stochastically (updates below half a bf16 step lost) lags 0.0036 (each seed at
  // least 0.0033) and 0.050.
  double first_lag = 0, eval_gap = 0;
  const int seeds = 4;
  for (int seed = 1; seed <= seeds; ++seed) {
    std::map<std::string, std::vector<nlohmann::json>> runs;
    for (const std::string mode : {"fp32", "bf16-pure"}) {
      const std::string out = dir.file(mode + "-seed" + std::to_string(seed));
      auto r = run_gputrain({"run", dir.file("r.yaml"), "--output-dir", out, "--set", "precision.mode=" + mode, "--set",
                             "run.seed=" + std::to_string(seed)});
      INFO(r.output);
      REQUIRE(r.exit_code == 0);
      runs[mode] = read_jsonl(out + "/metrics.jsonl");
    }
    const auto &fp32 = runs["fp32"], &pure = runs["bf16-pure"];
    first_lag += (pure.front()["loss_avg"].get<double>() - fp32.front()["loss_avg"].get<double>()) / seeds;
    eval_gap += (pure.back()["eval_loss"].get<double>() - fp32.back()["eval_loss"].get<double>()) / seeds;
  }
  std::cout << "bf16-pure against fp32 over " << seeds << " seeds: first 20 steps' loss lag " << first_lag
            << ", final eval loss gap " << eval_gap << std::endl;
  CHECK(std::fabs(first_lag) < 0.0015);
  CHECK(std::fabs(eval_gap) < 0.03);
}

TEST_CASE("cli: the memory plan is within its stated margin of the measured CPU peak", "[cli][memory]") {
  TempDir dir;
  write_file(dir.file("m.yaml"), kMem);
  // docs/training.md: the measured rise of peak resident memory over the estimate. The estimate counts
  // what is in use at once and bounds it from above: 0.71x-0.81x measured with freed blocks given back
  // to the OS (run.cpu_malloc_cache off, 2026-11-27), held to 0.65x-1.0x. The host block cache (the
  // default) never maps past the most ever in use, so its peak is that too: 0.70x-0.80x measured
  // (2026-12-02), where glibc's kept heap was 1.0x-1.5x. (bf16-pure measured 1.27x with that heap.)
  for (const std::vector<std::string>& sets :
       {std::vector<std::string>{}, {"train.gradient_checkpointing=full"}, {"train.per_device_batch_size=24"}}) {
    std::map<bool, double> measured;
    const double estimate = plan_total(dir.file("m.yaml"), sets);
    for (const bool cache : {false, true}) {
      std::vector<std::string> a{"run",
                                 dir.file("m.yaml"),
                                 "--output-dir",
                                 dir.file("out"),
                                 "--overwrite",
                                 "--set",
                                 std::string("run.cpu_malloc_cache=") + (cache ? "true" : "false"),
                                 "--set",
                                 "train.max_steps=2"};  // step 2 has everything: the AdamW state and a step's own
      for (const auto& s : sets) a.push_back("--set"), a.push_back(s);
      auto r = run_gputrain(a);
      REQUIRE(r.exit_code == 0);
      auto s = read_json(dir.file("out") + "/summary.json");
      measured[cache] = s["mem_peak_mb"].get<double>() - s["mem_start_mb"].get<double>();
      std::cout << (sets.empty() ? "fp32" : sets[0]) << (cache ? ", cache" : ", no cache") << ": measured "
                << measured[cache] << " MiB, estimated " << estimate << " MiB (" << measured[cache] / estimate << "x)"
                << std::endl;
      CHECK(measured[cache] > 0.65 * estimate);
      CHECK(measured[cache] < 1.0 * estimate);
    }
    CHECK(measured[true] < 1.1 * measured[false]);  // the cache does not raise the peak
  }
}

TEST_CASE("cli: batch size auto keeps the global batch and reports its choice", "[cli][batch]") {
  TempDir dir;
  write_file(dir.file("m.yaml"), kMem);
  auto r = run_gputrain({"run", dir.file("m.yaml"), "--output-dir", dir.file("a"), "--set",
                         "train.per_device_batch_size=auto", "--set", "train.global_batch_size=32", "--set",
                         "run.memory_budget_mb=700"});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("per_device_batch_size: auto -> 8 (grad_accum_steps 4)"));
  auto s = read_json(dir.file("a") + "/summary.json");
  CHECK(s["per_device_batch_size"] == 8);
  CHECK(s["grad_accum_steps"] == 4);
  CHECK(s["tokens"] == 3 * 32 * 256);
  auto plan = run_gputrain({"plan", dir.file("m.yaml"), "--set", "train.per_device_batch_size=auto", "--set",
                            "train.global_batch_size=32", "--set", "run.memory_budget_mb=700"});
  CHECK_THAT(plan.output, Contains("micro-batch 8 x seq_len 256, grad_accum_steps 4"));
  auto bad = run_gputrain({"validate", dir.file("m.yaml"), "--set", "train.per_device_batch_size=auto"});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.output, Contains("set train.global_batch_size"));
}
