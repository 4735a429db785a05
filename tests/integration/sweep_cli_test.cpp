// `gputrain sweep` through the binary on a tiny recipe: a grid run two at a time sharing the cores,
// stopped by SIGTERM while two trials run, the ranked table against the trials' summaries, the report,
// continuing a sweep (finished trials not rerun, stopped ones resumed), random trials inside their
// ranges (their distributions: unit/commands/sweep_plan_test.cpp), and bad arguments refused.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>

#include "test_util.h"
#include "util/device.h"

using namespace gputrain;
using namespace gputrain::test;
using Catch::Matchers::Contains;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string write_recipe(const TempDir& dir) {
  const std::string text = shared_data("tinyshakespeare.txt");
  std::string r = "run: {name: sweep-test}\n";
  r.append("model: {vocab_size: 256, seq_len: 32, n_layer: 1, n_head: 2, d_model: 32}\n");
  r.append("data:\n  train: {format: text, path: ").append(text).append(", span: [0.0, 0.05]}\n");
  r.append("  eval: {format: text, path: ").append(text).append(", span: [0.9, 0.91]}\n");
  r.append("train: {per_device_batch_size: 8, max_steps: 8, log_every: 4, eval_steps: 2}\n");
  r.append("optim: {lr: 3e-3, schedule: {warmup_steps: 2}}\n");
  write_file(dir.file("r.yaml"), r);
  return dir.file("r.yaml");
}

std::vector<std::string> sweep_command(const std::vector<std::string>& args) {
  std::vector<std::string> all = {"sweep"};
  all.insert(all.end(), args.begin(), args.end());
  return all;
}

CommandResult sweep(const std::vector<std::string>& args) { return run_gputrain(sweep_command(args)); }

}  // namespace

TEST_CASE("sweep: a grid runs as ordinary runs, K at a time, ranked by eval loss, and continues where it stopped",
          "[sweep][cli]") {
  TempDir dir;
  const std::string recipe = write_recipe(dir), out = dir.file("s");
  const std::vector<std::string> args = {
      recipe,  "--grid", "optim.lr=[1e-3,1e-2]", "--grid", "train.per_device_batch_size=[4,8]", "--parallel", "2",
      "--out", out};
  // Stopped for real: the trials pause at step 4 (a failpoint) and the sweep gets SIGTERM there. Two
  // trials pause at once (--parallel 2 runs them side by side); the sweep tells them to stop, and they
  // save and stop when let go; the other two never start.
  {
    ArmedFailpoints failpoints("train.step_done@4=pause;sweep.forwarded=pause");
    const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    const int pid = spawn_gputrain(sweep_command(args), null);
    ::close(null);
    KillOnExit guard({pid});
    const std::vector<int> paused = failpoints.wait_paused("train.step_done", pid, 2);
    REQUIRE(paused.size() == 2);
    guard.add(paused[0]);
    guard.add(paused[1]);
    ::kill(pid, SIGTERM);
    // The sweep has forwarded the signal (it pauses there) before the trials go on.
    REQUIRE(failpoints.wait_paused("sweep.forwarded", pid) == std::vector<int>{pid});
    failpoints.release("train.step_done");
    failpoints.release("sweep.forwarded");
    CHECK(wait_exit_code(pid) == 143);
  }
  for (const char* t : {"trial_000", "trial_001"}) {
    INFO(t);
    const json s = read_json(out + "/" + t + "/summary.json");
    CHECK(s["status"] == "preempted");
    CHECK(s["steps"] == 5);  // told during its pause after step 4, a run stops after the step it is in
  }
  CHECK_FALSE(fs::exists(out + "/trial_002"));
  CHECK_FALSE(fs::exists(out + "/trial_003"));

  // Continued: the stopped trials resume from their checkpoints, the others start.
  auto r = sweep(args);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("(4 to run, 2 at a time)"));
  for (const char* t : {"trial_000", "trial_001"})
    CHECK_THAT(read_file(out + "/logs/" + t + ".log"), Contains("resume: continuing from"));
  // Four trials, the last key varying fastest, each its own run with its values and half the cores.
  const std::vector<std::pair<std::string, int64_t>> expected = {{"0.001", 4}, {"0.001", 8}, {"0.01", 4}, {"0.01", 8}};
  const int64_t threads = std::max<int64_t>(1, resolve_threads(0) / 2);
  for (size_t i = 0; i < 4; ++i) {
    const std::string trial = out + "/trial_00" + std::to_string(i);
    INFO(trial);
    CHECK(read_json(trial + "/summary.json")["status"] == "ok");
    CHECK(read_json(trial + "/summary.json")["steps"] == 8);
    const std::string resolved = read_file(trial + "/recipe.resolved.yaml");
    CHECK_THAT(resolved, Contains("lr: " + expected[i].first) &&
                             Contains("per_device_batch_size: " + std::to_string(expected[i].second)) &&
                             Contains("threads: " + std::to_string(threads)));
  }
  // The table is sorted by each trial's own eval loss.
  const json rows = read_json(out + "/results.json");
  REQUIRE(rows.size() == 4);
  double last = -1;
  for (const json& row : rows) {
    const double loss = read_json(out + "/" + row["trial"].get<std::string>() + "/summary.json")["eval_loss"];
    CHECK(row["eval_loss"].get<double>() == loss);
    CHECK(loss >= last);
    last = loss;
  }
  CHECK_THAT(r.output, Contains("| rank | trial | optim.lr | train.per_device_batch_size | eval loss |"));
  CHECK_THAT(read_file(out + "/report.html"), Contains("trial_000") && Contains("trial_003"));

  // Again: finished trials are not rerun; a lost one runs again.
  const auto before = fs::last_write_time(out + "/trial_000/summary.json");
  fs::remove_all(out + "/trial_003");
  auto again = sweep(args);
  INFO(again.output);
  REQUIRE(again.exit_code == 0);
  CHECK_THAT(again.output, Contains("trial_000 finished earlier; not rerun") &&
                               Contains("trial_002 finished earlier; not rerun") && Contains("trial_003 starts") &&
                               Contains("(1 to run, 2 at a time)"));
  CHECK(fs::last_write_time(out + "/trial_000/summary.json") == before);
  CHECK(read_json(out + "/trial_003/summary.json")["status"] == "ok");

  // The same folder with other trials is refused.
  auto other = sweep({recipe, "--grid", "optim.lr=[1e-3]", "--out", out});
  CHECK(other.exit_code == 2);
  CHECK_THAT(other.output, Contains("holds a sweep of other trials") && Contains("fix:"));
}

TEST_CASE("sweep: random trials draw inside their ranges, the same seed the same trials", "[sweep][cli]") {
  TempDir dir;
  const std::string recipe = write_recipe(dir), out = dir.file("r");
  const std::vector<std::string> args = {recipe,
                                         "--random",
                                         "3",
                                         "--range",
                                         "optim.lr=1e-4:1e-2:log",
                                         "--range",
                                         "train.per_device_batch_size=2:8:int",
                                         "--seed",
                                         "4",
                                         "--out",
                                         out};
  auto r = sweep(args);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const json plan = read_json(out + "/sweep.json");
  REQUIRE(plan["trials"].size() == 3);
  for (const json& t : plan["trials"]) {
    const double lr = std::stod(t["values"]["optim.lr"].get<std::string>());
    const int64_t batch = std::stoll(t["values"]["train.per_device_batch_size"].get<std::string>());
    CHECK((lr >= 1e-4 && lr <= 1e-2));
    CHECK((batch >= 2 && batch <= 8));
  }
  auto again = sweep(args);  // the same draws: the sweep is the same one, already finished
  INFO(again.output);
  REQUIRE(again.exit_code == 0);
  CHECK_THAT(again.output, Contains("(0 to run"));
}

TEST_CASE("sweep: malformed grids and ranges, and a bad key, are refused before any trial runs", "[sweep][cli]") {
  TempDir dir;
  const std::string recipe = write_recipe(dir);
  auto no_list = sweep({recipe, "--grid", "optim.lr=3", "--out", dir.file("a")});
  CHECK(no_list.exit_code == 2);
  CHECK_THAT(no_list.output, Contains("needs a non-empty list"));
  auto bad_range = sweep({recipe, "--random", "2", "--range", "optim.lr=1e-2:1e-4", "--out", dir.file("b")});
  CHECK(bad_range.exit_code == 2);
  CHECK_THAT(bad_range.output, Contains("LO < HI"));
  auto no_random = sweep({recipe, "--range", "optim.lr=1e-4:1e-2", "--out", dir.file("c")});
  CHECK(no_random.exit_code == 2);
  CHECK_THAT(no_random.output, Contains("--random"));
  auto typo = sweep({recipe, "--grid", "optim.lrr=[1e-3,1e-2]", "--out", dir.file("d")});
  CHECK(typo.exit_code == 2);
  CHECK_THAT(typo.output, Contains("optim.lrr") && Contains("optim.lr"));
  CHECK_FALSE(fs::exists(dir.file("d")));
}
