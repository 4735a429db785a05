// The gputrain binary end to end: exit codes, messages, files written, the
// metrics contract's keys, graceful stops, and real learning.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <thread>

#include "test_util.h"

using namespace gputrain::test;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

const std::string kTiny =
    "run: {name: tiny, threads: 2}\n"
    "model: {vocab_size: 32, seq_len: 16, n_layer: 1, n_head: 2, d_model: 16}\n"
    "data:\n"
    "  train: {format: synthetic, synthetic: {vocab: 16, order: 1}}\n"
    "  eval: {format: synthetic, synthetic: {vocab: 16, order: 1}}\n"
    "train: {per_device_batch_size: 4, max_steps: 12, log_every: 5, eval_every: 6, eval_steps: 2}\n"
    "metrics: {progress: lines}\n";

}  // namespace

TEST_CASE("cli: --version, --help and usage errors", "[cli]") {
  auto v = run_gputrain({"--version"});
  CHECK(v.exit_code == 0);
  CHECK_THAT(v.output, Contains("gputrain 0.1.0"));
  CHECK_THAT(v.output, Contains("LibTorch 2."));
  auto h = run_gputrain({"--help"});
  CHECK(h.exit_code == 0);
  CHECK_THAT(h.output, Contains("print-config"));
  CHECK_THAT(h.output, Contains("Exit codes"));
  auto rh = run_gputrain({"run", "--help"});
  CHECK(rh.exit_code == 0);
  CHECK_THAT(rh.output, Contains("--set"));
  auto none = run_gputrain({});
  CHECK(none.exit_code == 2);
  CHECK_THAT(none.output, Contains("`gputrain` needs a command\n    fix: use one of run, plan, validate"));
  auto unknown = run_gputrain({"frobnicate"});
  CHECK(unknown.exit_code == 2);
  CHECK_THAT(unknown.output, Contains("unknown command 'frobnicate' for `gputrain`"));
  auto nested = run_gputrain({"data", "frob", "x"});
  CHECK(nested.exit_code == 2);
  CHECK_THAT(nested.output, Contains("unknown command 'frob' for `gputrain data`\n    fix: use one of prepare, bench"));
  CHECK_THAT(run_gputrain({"optim"}).output, Contains("`gputrain optim` needs a command"));
  // Counts name their range, not a double's.
  auto steps = run_gputrain({"optim", "bench", "--steps", "0"});
  CHECK(steps.exit_code == 2);
  CHECK_THAT(steps.output, Contains("--steps: Value 0 not in range 1 to 1073741824"));
  CHECK(run_gputrain({"run", "--no-such-flag"}).exit_code == 2);
  CHECK(run_gputrain({"print-config", "--format", "toml"}).exit_code == 2);
  auto bad_set = run_gputrain({"validate", "x.yaml", "--set", "nokey"});
  CHECK(bad_set.exit_code == 2);
  // The kernel benchmark times CUDA kernels: on the CPU it says so and exits 2.
  auto kernels_cpu = run_gputrain({"kernels", "bench", "--set", "run.device=cpu"});
  CHECK(kernels_cpu.exit_code == 2);
  CHECK_THAT(kernels_cpu.output, Contains("run it on a GPU"));
}

TEST_CASE("cli: validate reports every problem with position and exits 2", "[cli]") {
  TempDir dir;
  write_file(dir.file("good.yaml"), kTiny);
  auto ok = run_gputrain({"validate", dir.file("good.yaml")});
  CHECK(ok.exit_code == 0);
  CHECK_THAT(ok.output, Contains("ok"));

  write_file(dir.file("bad.yaml"), kTiny + "optim: {lr: fast, weight_decai: 0.1}\n");
  auto bad = run_gputrain({"validate", dir.file("bad.yaml")});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.output, Contains("bad.yaml:8:13: optim.lr: expected a number, got 'fast'"));
  CHECK_THAT(bad.output, Contains("bad.yaml:8:19: optim.weight_decai: unknown key"));
  CHECK_THAT(bad.output, Contains("did you mean 'optim.weight_decay'?"));

  auto missing = run_gputrain({"validate", dir.file("nope.yaml")});
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.output, Contains("no such file"));

  auto override_bad = run_gputrain({"validate", dir.file("good.yaml"), "--set", "model.n_head=3"});
  CHECK(override_bad.exit_code == 2);
  CHECK_THAT(override_bad.output, Contains("--set model.n_head=3: model.n_head: (3) must divide model.d_model (16)"));
}

TEST_CASE("cli: print-config prints the resolved recipe as YAML and JSON", "[cli]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), kTiny);
  auto y = run_gputrain({"print-config", dir.file("r.yaml"), "--set", "optim.lr=3e-4"});
  CHECK(y.exit_code == 0);
  CHECK_THAT(y.output, Contains("lr: 3e-04"));
  CHECK_THAT(y.output, Contains("output_dir: runs/tiny"));
  auto j = run_gputrain({"print-config", dir.file("r.yaml"), "--format", "json"});
  REQUIRE(j.exit_code == 0);
  auto cfg = nlohmann::json::parse(j.output);
  for (const char* section :
       {"run", "model", "data", "train", "precision", "optim", "parallel", "checkpoint", "metrics"})
    CHECK(cfg.contains(section));
  CHECK(cfg["optim"]["schedule"]["name"] == "cosine");
  CHECK(cfg["model"]["d_model"] == 16);
  auto builtin = run_gputrain({"print-config"});
  CHECK(builtin.exit_code == 0);
  CHECK_THAT(builtin.output, Contains("name: quickstart"));
  auto ref = run_gputrain({"print-config", "--reference"});
  CHECK_THAT(ref.output, Contains("| `optim.lr` |"));
}

TEST_CASE("cli: run writes metrics, summary and the resolved recipe", "[cli]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), kTiny);
  const std::string out = dir.file("out");
  auto r = run_gputrain({"run", dir.file("r.yaml"), "--output-dir", out, "--set", "train.grad_accum_steps=2"});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("step 5/12"));

  auto lines = read_jsonl(out + "/metrics.jsonl");
  REQUIRE(lines.size() == 4);  // steps 5, 6 (eval), 10, 12 (eval, final)
  std::vector<int> steps;
  for (const auto& l : lines) {
    steps.push_back(l["step"]);
    for (const char* k : {"step", "loss", "lr", "grad_norm", "tokens_per_s", "step_ms", "mem_peak_mb", "tokens"})
      CHECK(l.contains(k));
    CHECK(std::isfinite(l["loss"].get<double>()));
    CHECK(l["tokens_per_s"].get<double>() > 0);
    CHECK_FALSE(l.contains("mfu"));  // a CPU has no known peak: no number rather than a made-up one
  }
  CHECK(steps == std::vector<int>{5, 6, 10, 12});
  CHECK(lines[1].contains("eval_loss"));
  CHECK(lines[3].contains("eval_loss"));
  CHECK_FALSE(lines[0].contains("eval_loss"));
  CHECK(lines[3]["tokens"] == 12 * 2 * 4 * 16);

  auto s = read_json(out + "/summary.json");
  CHECK(s["status"] == "ok");
  CHECK(s["steps"] == 12);
  CHECK(s["tokens"] == 12 * 2 * 4 * 16);
  for (const char* k :
       {"wall_s", "tokens_per_s", "final_loss", "eval_loss", "mem_peak_mb", "recipe_hash", "entropy_floor"})
    CHECK(s.contains(k));
  CHECK_FALSE(s.contains("mfu"));

  // The saved recipe reproduces the run's settings exactly.
  auto again = run_gputrain({"print-config", out + "/recipe.resolved.yaml", "--format", "json"});
  auto first = run_gputrain({"print-config", dir.file("r.yaml"), "--format", "json", "--set",
                             "train.grad_accum_steps=2", "--set", "run.output_dir=" + out});
  auto expected = nlohmann::json::parse(first.output);
  expected["parallel"]["dp"] = 1;                    // auto, resolved: the number of processes
  expected["parallel"]["gather_dtype"] = "weights";  // auto, resolved: fp32 training gathers fp32
  CHECK(nlohmann::json::parse(again.output) == expected);

  // The same command again continues from the run's final checkpoint: nothing left to train.
  auto again_run = run_gputrain({"run", dir.file("r.yaml"), "--output-dir", out, "--set", "train.grad_accum_steps=2"});
  CHECK(again_run.exit_code == 0);
  CHECK_THAT(again_run.output, Contains("nothing to train"));
  CHECK(read_jsonl(out + "/metrics.jsonl").size() == 4);  // untouched
  // Without resuming, a second run into the same directory refuses to overwrite without --overwrite.
  auto clash = run_gputrain({"run", dir.file("r.yaml"), "--output-dir", out, "--set", "checkpoint.resume=never"});
  CHECK(clash.exit_code == 2);
  CHECK_THAT(clash.output, Contains("already holds a run"));
  CHECK(read_jsonl(out + "/metrics.jsonl").size() == 4);  // untouched
  CHECK(run_gputrain({"run", dir.file("r.yaml"), "--output-dir", out, "--overwrite"}).exit_code == 0);
}

TEST_CASE("cli: runtime failures exit 1, data errors exit 2", "[cli]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), kTiny);
  auto r = run_gputrain({"run", dir.file("r.yaml"), "--output-dir", "/proc/gputrain-cannot-exist"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Contains("cannot create output directory"));

  std::vector<uint16_t> tokens(4000, 3);
  tokens[2000] = 40000;
  write_file(dir.file("t.bin"), std::string(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2));
  write_file(dir.file("tok.yaml"),
             "model: {vocab_size: 64, seq_len: 3999, n_layer: 1, n_head: 1, d_model: 8}\n"
             "data: {train: {format: tokens, path: t.bin, dtype: uint16}}\n"
             "train: {per_device_batch_size: 1, max_steps: 2}\n");
  auto bad = run_gputrain({"run", dir.file("tok.yaml"), "--output-dir", dir.file("o2")});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.output, Contains("token id 40000 at token offset 2000"));
  CHECK(read_json(dir.file("o2") + "/summary.json")["status"] == "failed");
}

namespace {

// Starts a run, waits for its first metrics line, sends `sig`, returns the exit code.
int run_and_signal(const std::string& recipe, const std::string& out, int sig) {
  const int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
  const int pid = spawn_gputrain(
      {"run", recipe, "--output-dir", out, "--set", "train.max_steps=1000000", "--set", "train.log_every=1"}, null);
  close(null);
  KillOnExit guard({pid});
  // Signalled once it trains (its handlers are in place), however long that takes.
  REQUIRE(wait_until([&] {
    std::error_code ec;
    return fs::exists(out + "/metrics.jsonl", ec) && fs::file_size(out + "/metrics.jsonl", ec) > 0;
  }));
  kill(pid, sig);
  return wait_exit_code(pid);
}

}  // namespace

TEST_CASE("cli: SIGINT stops cleanly with status interrupted (130), SIGTERM preempted (143)", "[cli]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), kTiny);
  CHECK(run_and_signal(dir.file("r.yaml"), dir.file("a"), SIGINT) == 130);
  auto a = read_json(dir.file("a") + "/summary.json");
  CHECK(a["status"] == "interrupted");
  CHECK(a["steps"].get<int>() >= 1);
  CHECK(a["steps"].get<int>() < 1000000);
  // Every line of metrics.jsonl is whole JSON, the last one at the stopping step.
  auto lines = read_jsonl(dir.file("a") + "/metrics.jsonl");
  CHECK(lines.back()["step"] == a["steps"]);

  CHECK(run_and_signal(dir.file("r.yaml"), dir.file("b"), SIGTERM) == 143);
  CHECK(read_json(dir.file("b") + "/summary.json")["status"] == "preempted");
}

TEST_CASE("cli: a GPT learns real text well below the unigram baseline", "[cli][slow]") {
  const std::string text = shared_data("tinyshakespeare.txt");
  REQUIRE(fs::exists(text));  // ../shared/data sits beside every checkout, CI's included
  // Unigram entropy of the training bytes: the loss of the best context-free model.
  std::string data = read_file(text);
  const size_t train_end = data.size() * 9 / 10;
  std::vector<double> counts(256, 0);
  for (size_t i = 0; i < train_end; ++i) counts[static_cast<unsigned char>(data[i])] += 1;
  double unigram = 0;
  for (double c : counts)
    if (c > 0) unigram -= c / train_end * std::log(c / train_end);

  TempDir dir;
  write_file(dir.file("r.yaml"),
             "run: {name: shakespeare, threads: 2}\n" + tiny_shakespeare_model_and_data() +
                 "train: {per_device_batch_size: 16, max_steps: 250, log_every: 50, eval_steps: 8}\n"
                 "optim: {lr: 3e-3, schedule: {warmup_steps: 20}}\n");
  auto r = run_gputrain({"run", dir.file("r.yaml"), "--output-dir", dir.file("out")});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  auto s = read_json(dir.file("out") + "/summary.json");
  const double eval = s["eval_loss"];
  INFO("unigram " << unigram << " eval " << eval);
  CHECK(unigram == Approx(3.3).margin(0.2));  // English bytes: ~3.3 nats
  CHECK(eval < unigram - 0.6);
}

TEST_CASE("cli: the quickstart gets within its stated margin of the entropy floor", "[cli][slow]") {
  TempDir dir;
  auto r = run_gputrain({"run", "--output-dir", dir.file("qs"), "--set", "metrics.progress=off"});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  auto s = read_json(dir.file("qs") + "/summary.json");
  const double floor = s["entropy_floor"], eval = s["eval_loss"];
  INFO("floor " << floor << " eval " << eval);
  CHECK(eval > floor - 0.02);  // nothing beats the floor (eval batches are a finite sample)
  CHECK(eval < floor + 0.15);  // README's tour: "within 0.15 nats of the floor"
}

TEST_CASE("cli: a run is reproducible and does not depend on the number of data workers", "[cli]") {
  TempDir dir;
  const std::string smoke = std::string(GPUTRAIN_SOURCE_DIR) + "/configs/smoke.yaml";
  for (const char* workers : {"0", "3"})
    REQUIRE(run_gputrain({"run", smoke, "--output-dir", dir.file(std::string("w") + workers), "--set",
                          std::string("data.num_workers=") + workers, "--set", "run.threads=2"})
                .exit_code == 0);
  auto a = read_jsonl(dir.file("w0") + "/metrics.jsonl");
  auto b = read_jsonl(dir.file("w3") + "/metrics.jsonl");
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i]["loss"] == b[i]["loss"]);  // bitwise: same batches, same kernels, same threads
    CHECK(a[i]["grad_norm"] == b[i]["grad_norm"]);
  }
  CHECK(a.back()["eval_loss"] == b.back()["eval_loss"]);
  CHECK(a.back()["loss"].get<double>() < a.front()["loss"].get<double>());
}

TEST_CASE("cli: kernels.cuda_graphs on the CPU says it has no effect and trains as without it", "[cli]") {
  TempDir dir;
  const std::string smoke = std::string(GPUTRAIN_SOURCE_DIR) + "/configs/smoke.yaml";
  CommandResult with;
  for (const char* graphs : {"false", "true"}) {
    auto r = run_gputrain({"run", smoke, "--output-dir", dir.file(graphs), "--set", "run.threads=2", "--set",
                           std::string("kernels.cuda_graphs=") + graphs});
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    if (std::string(graphs) == "true") with = r;
  }
  CHECK_THAT(with.output, Contains("kernels.cuda_graphs has no effect on the CPU"));
  auto a = read_jsonl(dir.file("false") + "/metrics.jsonl");
  auto b = read_jsonl(dir.file("true") + "/metrics.jsonl");
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i]["loss"] == b[i]["loss"]);
  CHECK_FALSE(read_json(dir.file("true") + "/summary.json").contains("cuda_graphs"));
}

TEST_CASE("cli: metrics.profile_at writes a trace and a time table of the profiled steps", "[cli]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), kTiny);
  const std::string out = dir.file("out");
  auto r = run_gputrain({"run", dir.file("r.yaml"), "--output-dir", out, "--set", "metrics.profile_at=3", "--set",
                         "metrics.profile_steps=2"});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("profile: steps 3-4 written to"));
  // The trace is Chrome's JSON trace format with the ops that ran: the matrix products of each step.
  auto trace = read_json(out + "/profile/trace.json");
  REQUIRE(trace.contains("traceEvents"));
  int64_t matmuls = 0;
  for (const auto& e : trace["traceEvents"])
    if (e.contains("name") && e["name"].is_string() && e["name"].get<std::string>().rfind("aten::addmm", 0) == 0)
      ++matmuls;
  CHECK(matmuls > 0);
  // The table: a row per op by self time, per step.
  const std::string table = read_file(out + "/profile/ops.md");
  CHECK_THAT(table, Contains("# Profile of 2 steps"));
  CHECK_THAT(table, Contains("| op (self time) | calls per step | ms per step | share |"));
  CHECK_THAT(table, Contains("| aten::addmm |"));
  // A window past the last step is a recipe error naming the key.
  auto bad = run_gputrain({"run", dir.file("r.yaml"), "--output-dir", dir.file("bad"), "--set", "metrics.profile_at=12",
                           "--set", "metrics.profile_steps=3"});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.output, Contains("metrics.profile_at"));
  CHECK_THAT(bad.output, Contains("past train.max_steps (12)"));
}
