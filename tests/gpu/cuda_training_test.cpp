// GPU checks (label `gpu`; skipped where no CUDA device is present): the
// quickstart reaches its entropy-floor margin on the GPU and every precision
// mode tracks fp32 as on the CPU, through the CLI; the model's loss on CUDA matches
// the CPU's for the same weights, and a resumed run stays within the kernels'
// nondeterminism of an uninterrupted one.
#include <catch2/catch.hpp>
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "metrics/flops.h"
#include "model/gpt.h"
#include "test_util.h"

using namespace gputrain;
using namespace gputrain::test;

TEST_CASE("gpu: the quickstart recipe trains on CUDA to within its margin of the entropy floor", "[gpu]") {
  TempDir dir;
  auto r = run_gputrain({"run", "--output-dir", dir.file("qs"), "--set", "metrics.progress=off"});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  auto s = read_json(dir.file("qs") + "/summary.json");
  CHECK(s["device"].get<std::string>() != "cpu");
  CHECK(s["mem_peak_mb"].get<double>() > 0);
  // The CPU's reference (cli_test.cpp, README's tour): eval loss within 0.15 nats of the synthetic language's floor.
  REQUIRE(s.contains("entropy_floor"));
  CHECK(s["eval_loss"].get<double>() < s["entropy_floor"].get<double>() + 0.15);
  CHECK(s["eval_loss"].get<double>() > s["entropy_floor"].get<double>() - 0.01);  // no model beats the floor
  auto lines = read_jsonl(dir.file("qs") + "/metrics.jsonl");
  REQUIRE(lines.size() >= 2);
  // MFU on the GPUs of the peak table (metrics/flops.h); a tiny model uses a sliver of the GPU.
  const std::string gpu = s["device"].get<std::string>();
  if (peak_bf16_tflops(gpu)) {
    REQUIRE(s.contains("mfu"));
    CHECK(s["mfu"].get<double>() > 0);
    CHECK(s["mfu"].get<double>() < 0.2);
    CHECK(lines.back()["mfu"].get<double>() > 0);
  } else {
    CHECK_FALSE(s.contains("mfu"));
  }
}

TEST_CASE("gpu: GPT loss on CUDA matches the CPU (fp32)", "[gpu]") {
  torch::manual_seed(0);
  Gpt model(model_settings(64, 32, 2, 2, 64));
  auto tokens = torch::randint(0, 64, {4, 32}, torch::kLong);
  const double cpu = model->loss_sum(tokens, tokens).item<double>();
  model->to(torch::kCUDA);
  const double gpu = model->loss_sum(tokens.cuda(), tokens.cuda()).item<double>();
  CHECK(gpu == Approx(cpu).epsilon(1e-4));  // TF32 is off by default for fp32 matmuls
}

TEST_CASE("gpu: every precision mode with checkpointing tracks fp32 on CUDA", "[gpu]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), precision_reference_recipe());  // the CPU test's real text and settings
  std::map<std::string, std::vector<nlohmann::json>> lines;
  for (std::string mode : {"fp32", "tf32", "bf16", "fp16", "bf16-pure"}) {
    auto r = run_gputrain({"run", dir.file("r.yaml"), "--output-dir", dir.file(mode), "--set", "precision.mode=" + mode,
                           "--set", "train.gradient_checkpointing=selective"});
    INFO(mode << "\n" << r.output);
    REQUIRE(r.exit_code == 0);
    lines[mode] = read_jsonl(dir.file(mode) + "/metrics.jsonl");
    if (mode == "fp16") CHECK(lines[mode].back().contains("loss_scale"));
  }
  REQUIRE(lines["fp32"].size() >= 2);
  CHECK(read_json(dir.file("fp32") + "/summary.json")["device"].get<std::string>() != "cpu");
  CHECK(lines["fp32"].back()["loss_avg"].get<double>() < lines["fp32"].front()["loss_avg"].get<double>() - 1.0);
  check_precisions_track_fp32(lines);  // the CPU test's bounds (precision_cli_test.cpp)
}

TEST_CASE("gpu: batch size auto finds a batch by trial steps", "[gpu]") {
  TempDir dir;
  auto r = run_gputrain({"run", "--output-dir", dir.file("auto"), "--set", "metrics.progress=off", "--set",
                         "train.max_steps=5", "--set", "optim.schedule.warmup_steps=0", "--set",
                         "train.per_device_batch_size=auto", "--set", "train.global_batch_size=64"});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("trial steps on the GPU"));
  auto s = read_json(dir.file("auto") + "/summary.json");
  CHECK(s["per_device_batch_size"].get<int>() * s["grad_accum_steps"].get<int>() == 64);
}

// Issue 6 asks how close a resumed CUDA run stays to an uninterrupted one.
// The RNG (dropout), data position, optimizer and scaler state are restored
// exactly; what can differ is the kernels' own run-to-run nondeterminism
// (atomics in embedding backward, attention backward). The test prints the
// largest per-step loss difference for docs/benchmarks.md.
TEST_CASE("gpu: a resumed run stays within kernel nondeterminism of an uninterrupted one", "[gpu]") {
  TempDir dir;
  for (std::string mode : {"fp32", "bf16", "fp16"}) {
    const std::vector<std::string> common = {
        "--set", "metrics.progress=off",           "--set", "train.log_every=1",     "--set", "model.dropout=0.1",
        "--set", "optim.schedule.decay_steps=400", "--set", "precision.mode=" + mode};
    auto run = [&](const std::string& out, int steps) {
      std::vector<std::string> args = {"run", "--output-dir", dir.file(out), "--set",
                                       "train.max_steps=" + std::to_string(steps)};
      args.insert(args.end(), common.begin(), common.end());
      return run_gputrain(args);
    };
    INFO(mode);
    REQUIRE(run(mode + "-straight", 80).exit_code == 0);
    REQUIRE(run(mode + "-resumed", 40).exit_code == 0);
    auto r = run(mode + "-resumed", 80);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.output, Catch::Contains("at step 40"));
    auto a = read_jsonl(dir.file(mode + "-straight") + "/metrics.jsonl");
    auto b = read_jsonl(dir.file(mode + "-resumed") + "/metrics.jsonl");
    REQUIRE(a.size() == 80);
    REQUIRE(b.size() == 80);
    double first_steps = 0, after_resume = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      const double d = std::abs(a[i]["loss"].get<double>() - b[i]["loss"].get<double>());
      (i < 40 ? first_steps : after_resume) = std::max(i < 40 ? first_steps : after_resume, d);
    }
    WARN(mode << ": max |loss difference| steps 1-40 (no resume) " << first_steps << ", steps 41-80 (resumed) "
              << after_resume);
    // A broken restore (RNG, data position, optimizer) shows as differences of
    // 0.05 and more at once; kernel nondeterminism stays orders below.
    CHECK(after_resume < 1e-2);
    CHECK(after_resume <= std::max(10 * first_steps, 1e-3));
  }
}

TEST_CASE("gpu: NCCL with a world of one, and the offloaded optimizer, train like a plain GPU run", "[gpu]") {
  TempDir dir;
  auto run = [&](const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> args = {
        "run",   "--output-dir",       dir.file(name), "--set",          "metrics.progress=off",
        "--set", "train.max_steps=50", "--set",        "model.dropout=0"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = run_gputrain(args);
    INFO(name << "\n" << r.output);
    REQUIRE(r.exit_code == 0);
    return read_jsonl(dir.file(name) + "/metrics.jsonl");
  };
  const auto plain = run("plain", {});
  // The launcher's path: rendezvous, ProcessGroupNCCL, gradient buckets (all-reduce over one rank).
  const auto nccl =
      run("nccl", {"--nproc-per-node", "1", "--set", "parallel.backend=nccl", "--set", "parallel.zero=1"});
  const auto offload = run("offload", {"--set", "parallel.offload_optimizer=true"});
  REQUIRE(plain.size() == nccl.size());
  REQUIRE(plain.size() == offload.size());
  double nccl_diff = 0, offload_diff = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    nccl_diff = std::max(nccl_diff, std::abs(plain[i]["loss"].get<double>() - nccl[i]["loss"].get<double>()));
    offload_diff = std::max(offload_diff, std::abs(plain[i]["loss"].get<double>() - offload[i]["loss"].get<double>()));
  }
  WARN("largest per-step loss difference from the plain GPU run: NCCL world of one "
       << nccl_diff << ", offloaded optimizer (CPU update) " << offload_diff);
  CHECK(nccl_diff < 1e-3);     // the same arithmetic up to kernel nondeterminism
  CHECK(offload_diff < 1e-3);  // AdamW's C++ loop on the CPU against the CUDA kernel
}

TEST_CASE("gpu: kernels bench times every fused kernel against ATen", "[gpu]") {
  auto r = run_gputrain({"kernels", "bench", "--repeats", "3", "--set", "precision.mode=bf16"});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Matchers::Contains("residual add + LayerNorm"));
  CHECK_THAT(r.output, Catch::Matchers::Contains("cross-entropy"));
  CHECK_THAT(r.output, Catch::Matchers::Contains("stream fp32, branch/out bf16"));
  CHECK_THAT(r.output, Catch::Matchers::Contains("bias + GELU(tanh)"));
  // The quickstart model's q/k/v and projection widths (d_model 128).
  CHECK_THAT(r.output, Catch::Matchers::Contains("bias gradient (column sums) | [") &&
                           Catch::Matchers::Contains(", 384] bf16") && Catch::Matchers::Contains(", 128] bf16"));
}

// parallel.offload_optimizer keeps the update's weights in host copies: a checkpoint loaded in place
// (spike rollback, resume) has to reach them, or the next update writes the old weights back.
TEST_CASE("gpu: spike rollback and resume with the offloaded optimizer", "[gpu]") {
  TempDir dir;
  write_file(dir.file("r.yaml"),
             "run: {name: offload-rollback}\n"
             "model: {vocab_size: 256, seq_len: 32, n_layer: 1, n_head: 2, d_model: 32}\n"
             "data:\n  train: {format: text, path: " +
                 shared_data("tinyshakespeare.txt") +
                 ", span: [0.0, 0.05]}\n"
                 "train: {per_device_batch_size: 8, max_steps: 23, log_every: 1, spike_window: 10, "
                 "spike_threshold: 6, spike_policy: rollback, spike_max_rollbacks: 1}\n"
                 "optim: {lr: 3e-3, schedule: {warmup_steps: 2, decay_steps: 40}}\n"
                 "parallel: {offload_optimizer: true}\n"
                 "checkpoint: {every: 10, keep_last: 0}\nmetrics: {progress: off}\n");
  auto file = [&](const std::string& run, const char* step, const char* name) {
    return read_file(run + "/checkpoints/step_000000" + step + "/" + name);
  };
  const std::string rolled = dir.file("rolled");
  auto r = run_shell("GPUTRAIN_POISON_STEPS=23 \"$GPUTRAIN\" run '" + dir.file("r.yaml") + "' --output-dir '" + rolled +
                     "'");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Matchers::Contains("rolled back to the checkpoint of step 20"));
  for (const char* f : {"model.safetensors", "optimizer.safetensors"}) {
    INFO(f);
    CHECK(file(rolled, "23", f) == file(rolled, "20", f));
  }
  // Resumed at step 10 and run to 20: the same weights as the run that went through (the update
  // after the resume starts from the checkpoint's weights, not the host copies' initial ones).
  const std::string through = dir.file("through"), resumed = dir.file("resumed");
  auto go = [&](const std::string& out, const std::string& steps) {
    auto res = run_gputrain({"run", dir.file("r.yaml"), "--output-dir", out, "--set", "train.max_steps=" + steps,
                             "--set", "train.spike_policy=off"});
    INFO(out << "\n" << res.output);
    REQUIRE(res.exit_code == 0);
  };
  go(through, "20");
  go(resumed, "10");
  go(resumed, "20");
  const double a = read_json(through + "/summary.json")["final_loss"].get<double>();
  const double b = read_json(resumed + "/summary.json")["final_loss"].get<double>();
  CHECK(std::abs(a - b) < 1e-3);  // the kernels' nondeterminism; initial host weights would be far off
}
