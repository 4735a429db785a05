// Checkpoints end to end through the gputrain binary: exact resume (bitwise
// on the CPU), changed recipes, preemption signals, SIGKILL at any moment,
// corrupt and truncated files, max_wall_time, train.nan_policy, export, and
// one run per output folder.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/training_checkpoint.h"
#include "export_reference.h"
#include "same_tensors.h"
#include "test_util.h"
#include "util/dir_lock.h"

using namespace gputrain;
using namespace gputrain::test;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

// A tiny GPT with dropout (so the RNG state matters) on a small span of real
// text, so that 12 steps cross an epoch boundary of the shuffled sampler. The
// schedule's length is fixed so that changing max_steps does not change it.
std::string tiny_recipe() {
  return "run: {name: ckpt, threads: 2}\n"
         "model: {vocab_size: 256, seq_len: 16, n_layer: 1, n_head: 2, d_model: 16, dropout: 0.1}\n"
         "data:\n"
         "  train: {format: text, path: " +
         shared_data("tinyshakespeare.txt") +
         ", span: [0.0, 0.0005]}\n"
         "train: {per_device_batch_size: 4, max_steps: 12, log_every: 1}\n"
         "optim: {lr: 3e-3, schedule: {warmup_steps: 2, decay_steps: 12}}\n"
         "metrics: {progress: off}\n";
}

// A checkpoint directory's name: step_<N>, zero-padded to 8 digits.
fs::path step_dir(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

fs::path newest_checkpoint(const std::string& out) {
  const CheckpointListing l = list_checkpoints(fs::path(out) / "checkpoints", CheckpointCheck::kChecksums);
  REQUIRE_FALSE(l.complete.empty());
  return l.complete.back();
}

// Starts a run in the background with its output discarded.
int spawn_run(const std::string& recipe, const std::string& out, const std::vector<std::string>& sets) {
  std::vector<std::string> args = {"run", recipe, "--output-dir", out};
  for (const auto& s : sets) args.insert(args.end(), {"--set", s});
  const int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
  const int pid = spawn_gputrain(args, null);
  close(null);
  return pid;
}

bool has_metrics(const std::string& out) {
  std::error_code ec;
  return fs::exists(out + "/metrics.jsonl", ec) && fs::file_size(out + "/metrics.jsonl", ec) > 0;
}

}  // namespace

TEST_CASE("checkpoint: k steps then resume to N is bitwise the same as N steps", "[checkpoint][cli]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), tiny_recipe());
  // Each variant exercises different saved state: dropout RNG and the shuffled
  // sampler (all), the fp16 loss scaler, Adafactor's factored moments, 8-bit
  // Adam's quantized blocks, and gradient accumulation.
  const std::vector<std::pair<std::string, std::vector<std::string>>> variants = {
      {"fp32 adamw", {}},
      {"fp16 adamw", {"precision.mode=fp16"}},
      {"adafactor", {"optim.name=adafactor"}},
      {"adamw8bit", {"optim.name=adamw8bit", "optim.adamw8bit.min_8bit_size=256"}},
      {"grad accumulation", {"train.grad_accum_steps=3", "train.per_device_batch_size=2"}},
  };
  for (const auto& [name, sets] : variants) {
    INFO(name);
    const std::string straight = dir.file(name + "-straight"), resumed = dir.file(name + "-resumed");
    auto a = run_recipe(dir.file("r.yaml"), straight, sets);
    INFO(a.output);
    REQUIRE(a.exit_code == 0);

    std::vector<std::string> first = sets;
    first.push_back("train.max_steps=5");
    auto b1 = run_recipe(dir.file("r.yaml"), resumed, first);
    INFO(b1.output);
    REQUIRE(b1.exit_code == 0);
    CHECK(newest_checkpoint(resumed).filename() == "step_00000005");
    auto b2 = run_recipe(dir.file("r.yaml"), resumed, sets);  // the same command with the full step count
    INFO(b2.output);
    REQUIRE(b2.exit_code == 0);
    CHECK_THAT(b2.output, Contains("resume: continuing from") && Contains("at step 5"));
    CHECK_THAT(b2.output, Contains("resume: train.max_steps changed from 5 to 12"));

    // Every logged step the same: loss, lr, gradient norm, tokens (loss scale under fp16).
    CHECK(step_records(resumed) == step_records(straight));
    REQUIRE(step_records(resumed).size() == 12);
    // And the final state bit for bit.
    for (const char* f : {"model.safetensors", "optimizer.safetensors", "rng.safetensors"}) {
      INFO(f);
      CHECK(read_file((newest_checkpoint(resumed) / f).string()) ==
            read_file((newest_checkpoint(straight) / f).string()));
    }
    auto s = read_json(resumed + "/summary.json");
    CHECK(s["steps"] == 12);
    CHECK(s["tokens"] == read_json(straight + "/summary.json")["tokens"]);
    CHECK(s["resumed_from_step"] == 5);
  }
}

TEST_CASE("checkpoint: resuming with a changed recipe refuses shape changes and reports safe ones",
          "[checkpoint][cli]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), tiny_recipe());
  const std::string out = dir.file("out");
  REQUIRE(run_recipe(dir.file("r.yaml"), out, {"train.max_steps=4"}).exit_code == 0);

  auto shape = run_recipe(dir.file("r.yaml"), out, {"model.d_model=32", "data.train.span=[0.0, 0.001]"});
  CHECK(shape.exit_code == 2);
  CHECK_THAT(shape.output, Contains("cannot resume from") && Contains("step_00000004"));
  CHECK_THAT(shape.output, Contains("model.d_model: 16 in the checkpoint, 32 now"));
  CHECK_THAT(shape.output, Contains("data.train.span: [0.0,0.0005] in the checkpoint, [0.0,0.001] now"));
  CHECK_THAT(shape.output, Contains("fix: put these keys back"));
  CHECK(read_jsonl(out + "/metrics.jsonl").size() == 4);  // nothing written

  auto safe = run_recipe(dir.file("r.yaml"), out,
                         {"train.max_steps=6", "train.log_every=2", "optim.lr=1e-3", "kernels.cuda_graphs=true"});
  INFO(safe.output);
  CHECK(safe.exit_code == 0);
  CHECK_THAT(safe.output, Contains("resume: train.max_steps changed from 4 to 6"));
  CHECK_THAT(safe.output, Contains("resume: kernels.cuda_graphs changed from false to true\n"));  // how, not what
  CHECK_THAT(safe.output, Contains("resume: train.log_every changed from 1 to 2"));
  CHECK_THAT(safe.output, Contains("resume: optim.lr changed from 0.003 to 0.001; the run continues, but not as the "
                                   "saved one would have"));
  CHECK(read_json(out + "/summary.json")["steps"] == 6);

  // resume: never into a directory that holds a run needs --overwrite, which also drops its checkpoints.
  auto never = run_recipe(dir.file("r.yaml"), out, {"checkpoint.resume=never"});
  CHECK(never.exit_code == 2);
  CHECK_THAT(never.output, Contains("already holds a run"));
  auto fresh =
      run_gputrain({"run", dir.file("r.yaml"), "--output-dir", out, "--overwrite", "--set", "train.max_steps=3"});
  CHECK(fresh.exit_code == 0);
  CHECK_THAT(fresh.output, Contains("--overwrite: removed 2 checkpoint(s)"));
  CHECK(newest_checkpoint(out).filename() == "step_00000003");
  CHECK_FALSE(read_json(out + "/summary.json").contains("resumed_from_step"));
}

TEST_CASE(
    "checkpoint: a run folder moved or copied with its checkpoints continues as the same run, and a checkpoint "
    "of another folder's run says so",
    "[checkpoint][cli]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), tiny_recipe());
  const std::string straight = dir.file("straight"), first = dir.file("first"), copied = dir.file("copied"),
                    moved = dir.file("moved");
  REQUIRE(run_recipe(dir.file("r.yaml"), straight, {}).exit_code == 0);
  REQUIRE(run_recipe(dir.file("r.yaml"), first, {"train.max_steps=5"}).exit_code == 0);
  fs::copy(first, copied, fs::copy_options::recursive);  // cp -r
  fs::rename(first, moved);                              // mv
  for (const std::string& out : {copied, moved}) {
    INFO(out);
    auto resumed = run_recipe(dir.file("r.yaml"), out, {});
    INFO(resumed.output);
    REQUIRE(resumed.exit_code == 0);
    CHECK_THAT(resumed.output, Contains("resume: continuing from") && Contains("at step 5"));
    CHECK(step_records(out) == step_records(straight));  // the first 5 steps kept, 7 appended
  }

  // The moved run's last checkpoint, taken to a folder that holds another run: refused, nothing written.
  const std::string theirs = "checkpoint.resume=" + newest_checkpoint(moved).string();
  const auto copied_metrics = read_file(copied + "/metrics.jsonl");
  auto clash = run_recipe(dir.file("r.yaml"), copied, {theirs, "train.max_steps=14"});
  CHECK(clash.exit_code == 2);
  CHECK_THAT(clash.output, Contains("already holds a run") && Contains("belongs to another: the run in '" + moved));
  CHECK_THAT(clash.output, Contains("fix: continue that run with --output-dir " + moved));
  CHECK(read_file(copied + "/metrics.jsonl") == copied_metrics);

  // Into a new folder it branches: its own metrics from the checkpoint's step on, and it says whose it was.
  const std::string branch = dir.file("branch");
  auto branched = run_recipe(dir.file("r.yaml"), branch, {theirs, "train.max_steps=14"});
  INFO(branched.output);
  REQUIRE(branched.exit_code == 0);
  CHECK_THAT(branched.output, Contains("resume: the checkpoint belongs to the run in '" + moved));
  const auto records = step_records(branch);
  REQUIRE(records.size() == 2);
  CHECK(records.front()["step"] == 13);
}

TEST_CASE(
    "checkpoint: checkpoint.dir outside the output folder: the same folder continues, another one branches or is "
    "refused as with moved folders",
    "[checkpoint][cli]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), tiny_recipe());
  const std::string straight = dir.file("straight"), out = dir.file("out"), elsewhere = dir.file("ckpts");
  const std::string ckpt = "checkpoint.dir=" + elsewhere;
  REQUIRE(run_recipe(dir.file("r.yaml"), straight, {}).exit_code == 0);
  REQUIRE(run_recipe(dir.file("r.yaml"), out, {ckpt, "train.max_steps=5"}).exit_code == 0);
  CHECK_FALSE(fs::exists(out + "/checkpoints"));
  REQUIRE(list_checkpoints(elsewhere).complete.size() == 1);

  // The same command into the same folder continues from the checkpoint elsewhere, appending its metrics.
  auto resumed = run_recipe(dir.file("r.yaml"), out, {ckpt});
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  CHECK_THAT(resumed.output, Contains("resume: continuing from " + elsewhere + "/step_00000005 at step 5"));
  CHECK_THAT(resumed.output, !Contains("belongs to the run in"));
  CHECK(step_records(out) == step_records(straight));
  CHECK(read_json(out + "/summary.json")["resumed_from_step"] == 5);

  // Another folder that already holds a run: the checkpoint is the first folder's run's; refused, nothing written.
  const std::string other = dir.file("other");
  REQUIRE(run_recipe(dir.file("r.yaml"), other, {"train.max_steps=3"}).exit_code == 0);
  const std::string other_metrics = read_file(other + "/metrics.jsonl");
  auto clash = run_recipe(dir.file("r.yaml"), other, {ckpt, "train.max_steps=14"});
  INFO(clash.output);
  CHECK(clash.exit_code == 2);
  CHECK_THAT(clash.output, Contains("already holds a run") && Contains("belongs to another: the run in '" + out));
  CHECK(read_file(other + "/metrics.jsonl") == other_metrics);
  CHECK(list_checkpoints(elsewhere).complete.back().filename() == step_dir(12));

  // A new folder branches from the newest checkpoint there (step 12): its own metrics, and it says whose it was.
  const std::string branch = dir.file("branch");
  auto branched = run_recipe(dir.file("r.yaml"), branch, {ckpt, "train.max_steps=14"});
  INFO(branched.output);
  REQUIRE(branched.exit_code == 0);
  CHECK_THAT(branched.output, Contains("resume: the checkpoint belongs to the run in '" + out));
  const auto records = step_records(branch);
  REQUIRE(records.size() == 2);
  CHECK(records.front()["step"] == 13);
  CHECK(step_records(out) == step_records(straight));  // the first run's metrics untouched
}

TEST_CASE("checkpoint: SIGTERM and SIGUSR1 save, exit 143 and the resumed run ends as an uninterrupted one",
          "[checkpoint][cli]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), tiny_recipe());
  const std::vector<std::string> sets = {"train.max_steps=20", "optim.schedule.decay_steps=20", "train.log_every=1"};
  auto straight = run_recipe(dir.file("r.yaml"), dir.file("straight"), sets);
  REQUIRE(straight.exit_code == 0);
  // The signal reaches the run while it is paused after step 5 (a failpoint), so it lands mid-run
  // however fast or slow the steps are.
  auto signal_at_step_5 = [&](const std::string& out, const std::vector<std::string>& run_sets, int sig) {
    ArmedFailpoints failpoints("train.step_done@5=pause");
    const int pid = spawn_run(dir.file("r.yaml"), out, run_sets);
    KillOnExit guard({pid});
    REQUIRE(failpoints.wait_paused("train.step_done", pid) == std::vector<int>{pid});
    kill(pid, sig);
    failpoints.release("train.step_done");
    return wait_exit_code(pid);
  };
  for (int sig : {SIGTERM, SIGUSR1}) {
    INFO("signal " << sig);
    const std::string out = dir.file("sig" + std::to_string(sig));
    CHECK(signal_at_step_5(out, sets, sig) == 143);
    auto s = read_json(out + "/summary.json");
    CHECK(s["status"] == "preempted");
    CHECK(s["stop_reason"] == (sig == SIGTERM ? "SIGTERM" : "SIGUSR1"));
    const int64_t stopped = s["steps"];
    CHECK(stopped >= 5);
    CHECK(stopped < 20);
    CHECK(newest_checkpoint(out).filename() == step_dir(stopped));

    auto resumed = run_recipe(dir.file("r.yaml"), out, sets);
    INFO(resumed.output);
    REQUIRE(resumed.exit_code == 0);
    CHECK(read_json(out + "/summary.json")["resumed_from_step"] == stopped);
    CHECK(read_jsonl(out + "/metrics.jsonl").size() == 20);  // one line per step, none twice
    CHECK(read_file((newest_checkpoint(out) / "model.safetensors").string()) ==
          read_file((newest_checkpoint(dir.file("straight")) / "model.safetensors").string()));
  }
  // A configured signal list replaces the default one.
  const std::string out = dir.file("usr2");
  CHECK(signal_at_step_5(out, with(sets, {"checkpoint.preempt_signals=[USR2]"}), SIGUSR2) == 143);
  CHECK(read_json(out + "/summary.json")["stop_reason"] == "SIGUSR2");
}

TEST_CASE("checkpoint: SIGINT saves and exits 130, and a second signal exits at once", "[checkpoint][cli]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), tiny_recipe());
  const std::string out = dir.file("int");
  {
    ArmedFailpoints failpoints("train.step_done@3=pause");
    const int pid = spawn_run(dir.file("r.yaml"), out, {"train.max_steps=1000000", "train.log_every=1"});
    KillOnExit guard({pid});
    REQUIRE(failpoints.wait_paused("train.step_done", pid) == std::vector<int>{pid});
    kill(pid, SIGINT);
    failpoints.release("train.step_done");
    CHECK(wait_exit_code(pid) == 130);
  }
  auto s = read_json(out + "/summary.json");
  CHECK(s["status"] == "interrupted");
  CHECK(newest_checkpoint(out).filename() == step_dir(s["steps"].get<int64_t>()));

  // Both signals reach the run while it is paused after its first step (a failpoint), before the
  // graceful stop the first asks for can begin: the second ends the process with its own code.
  const std::string out2 = dir.file("twice");
  ArmedFailpoints failpoints("train.step_done@1=pause");
  const int pid = spawn_run(dir.file("r.yaml"), out2, {"train.max_steps=1000000", "train.log_every=1"});
  KillOnExit guard({pid});
  REQUIRE(failpoints.wait_paused("train.step_done", pid) == std::vector<int>{pid});
  kill(pid, SIGINT);
  kill(pid, SIGTERM);
  // The two may be handled on two threads at once, so either one can be "the second".
  const int code = wait_exit_code(pid);
  CHECK((code == 130 || code == 143));
  // Exited at once: no graceful stop's summary or checkpoint.
  CHECK_FALSE(fs::exists(out2 + "/summary.json"));
  CHECK(list_checkpoints(fs::path(out2) / "checkpoints").complete.empty());
}

// A SIGKILLed launcher's workers were told of its death once per launcher thread; the repeat made
// them exit at once, unsaved (parallel_cli_test's SIGKILL case failed now and then under load).
TEST_CASE("checkpoint: a parent's death told twice (once per parent thread) still saves and stops as preempted",
          "[checkpoint][cli]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), tiny_recipe());
  const std::string out = dir.file("o");
  // The run, told by the first notice, pauses before its save (failpoint train.stopping) until the
  // second notice has been sent: the double notice meets a run that is still saving, for certain.
  ArmedFailpoints failpoints("train.stopping=pause");
  std::vector<std::string> args = {std::string(GPUTRAIN_SOURCE_DIR) + "/tests/scripts/two_thread_parent.py",
                                   out + "/metrics.jsonl",
                                   "2",
                                   "train.stopping",
                                   GPUTRAIN_BINARY,
                                   "run",
                                   dir.file("r.yaml"),
                                   "--output-dir",
                                   out};
  for (const char* set :
       {"train.max_steps=1000000", "train.log_every=1", "model.d_model=256", "model.n_layer=4", "model.seq_len=128"})
    args.insert(args.end(), {"--set", set});
  const auto r = run_python(args);  // returns once the run (holding its output pipe) has ended
  INFO(r.output);
  REQUIRE(fs::exists(out + "/summary.json"));
  const auto s = read_json(out + "/summary.json");
  CHECK(s["status"] == "preempted");
  CHECK(s["stop_reason"] == "SIGTERM");
  CHECK(newest_checkpoint(out).filename() == step_dir(s["steps"].get<int64_t>()));
}

TEST_CASE("checkpoint: SIGKILL at any moment, during saves (also asynchronous ones) included, leaves a good checkpoint",
          "[checkpoint][cli]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), tiny_recipe());
  const std::string out = dir.file("out");
  const fs::path root = fs::path(out) / "checkpoints";
  // Saves that take a while (about 20 MB each) at every step, keeping two.
  const std::vector<std::string> sets = {"train.max_steps=1000000", "model.d_model=256", "model.n_layer=2",
                                         "checkpoint.every=1", "checkpoint.keep_last=2"};
  std::mt19937 rng(1234);
  int64_t newest_step = 0;
  int killed_mid_file = 0;
  for (int trial = 0; trial < 8; ++trial) {
    INFO("trial " << trial);
    std::vector<std::string> trial_sets = sets;
    if (trial >= 4) trial_sets.push_back("checkpoint.async=true");  // written on a thread while training goes on
    const bool mid_file = trial % 2 == 1;
    int pid = 0;
    if (mid_file) {
      // Killed inside a file for certain: the writer pauses halfway through the first file of its first
      // save (a failpoint), is seen to have left a partial file, and is killed there.
      ArmedFailpoints failpoints("safetensors.mid_file=pause");
      pid = spawn_run(dir.file("r.yaml"), out, trial_sets);
      REQUIRE(failpoints.wait_paused("safetensors.mid_file", pid) == std::vector<int>{pid});
      bool partial = false;
      for (const auto& d : fs::directory_iterator(root))
        if (d.path().filename().string().rfind(".tmp-step_", 0) == 0)
          for (const auto& f : fs::directory_iterator(d.path()))
            partial |= f.path().extension() == ".tmp" && fs::file_size(f.path()) > 0;
      CHECK(partial);
      kill(pid, SIGKILL);
      killed_mid_file += partial;
    } else {
      pid = spawn_run(dir.file("r.yaml"), out, trial_sets);
      // Kill at a random moment once the run has saved a checkpoint newer than the last one.
      REQUIRE(wait_until([&] {
        const CheckpointListing l = list_checkpoints(root);
        return !l.complete.empty() && std::stoll(l.complete.back().filename().string().substr(5)) > newest_step;
      }));
      std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 400)(rng)));
      kill(pid, SIGKILL);
    }
    CHECK(wait_exit_code(pid) == 128 + SIGKILL);
    // Its lock file stays behind, naming it; the kernel released the lock, so the next trial starts at once.
    const auto stale = read_lock_holder(fs::path(out) / kLockFileName);
    REQUIRE(stale);
    CHECK(stale->pid == pid);
    // The newest complete checkpoint verifies and loads, nothing is left broken, and no progress before
    // the kill was lost (a kill inside the first save leaves the previous trial's newest).
    const CheckpointListing l = list_checkpoints(root, CheckpointCheck::kChecksums);
    CHECK(l.broken.empty());
    REQUIRE_FALSE(l.complete.empty());
    const TrainingSnapshot snap = load_training_checkpoint(l.complete.back());
    if (mid_file) CHECK(snap.counters.step == newest_step);
    else CHECK(snap.counters.step > newest_step);
    newest_step = snap.counters.step;
  }
  CHECK(killed_mid_file == 4);
  // resume: auto continues from the newest one and finishes.
  auto last = run_recipe(dir.file("r.yaml"), out,
                         {"train.max_steps=" + std::to_string(newest_step + 2), "model.d_model=256", "model.n_layer=2",
                          "checkpoint.every=1", "checkpoint.keep_last=2"});
  INFO(last.output);
  REQUIRE(last.exit_code == 0);
  CHECK_FALSE(Contains("passing over").match(last.output));
  auto s = read_json(out + "/summary.json");
  CHECK(s["resumed_from_step"] == newest_step);
  CHECK(s["steps"] == newest_step + 2);
  // Nothing of the killed runs is left: their temporary saves were cleared, the lock file went with the last run.
  for (const auto& e : fs::directory_iterator(root)) CHECK(e.path().filename().string().rfind("step_", 0) == 0);
  CHECK_FALSE(fs::exists(fs::path(out) / kLockFileName));
}

TEST_CASE(
    "checkpoint: a second run, export or data prepare into a live run's folder exits 2 at once, and the "
    "first finishes clean",
    "[checkpoint][cli][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), tiny_recipe());
  const std::string out = dir.file("out");
  const int64_t steps = 300;
  const std::vector<std::string> sets = {
      "train.max_steps=" + std::to_string(steps), "model.d_model=128",    "model.seq_len=64",
      "optim.schedule.decay_steps=300",           "checkpoint.every=100", "checkpoint.keep_last=2"};
  // The first run pauses after its save of step 100 (a failpoint) until the commands below are done:
  // they meet a live run for certain, however slow this machine is. (A command that waited for the
  // folder would wait for ever here, and ctest's limit would fail the test.)
  ArmedFailpoints failpoints("train.step_done@100=pause");
  const int pid = spawn_run(dir.file("r.yaml"), out, sets);
  KillOnExit guard({pid});
  REQUIRE(failpoints.wait_paused("train.step_done", pid) == std::vector<int>{pid});
  // As in the report: the first run has saved, so a second one would resume from its checkpoint.
  REQUIRE_FALSE(list_checkpoints(fs::path(out) / "checkpoints").complete.empty());
  const std::string holder = "'" + out + "' is in use by gputrain pid " + std::to_string(pid) + " on host ";
  auto second = run_recipe(dir.file("r.yaml"), out, sets);
  INFO(second.output);
  CHECK(second.exit_code == 2);
  CHECK_THAT(second.output, Contains(holder) && Contains("(gputrain run " + dir.file("r.yaml")));
  CHECK_THAT(second.output,
             Contains("fix: wait for it, stop it (kill " + std::to_string(pid) + "), or use another --output-dir"));
  // --overwrite would delete the live run's checkpoints: refused before it removes anything.
  auto overwrite = run_gputrain({"run", dir.file("r.yaml"), "--output-dir", out, "--overwrite"});
  CHECK(overwrite.exit_code == 2);
  CHECK_THAT(overwrite.output, Contains(holder));
  CHECK_FALSE(list_checkpoints(fs::path(out) / "checkpoints").complete.empty());
  // Exporting into the live folder is writing there; exporting from it (its complete checkpoints) is reading.
  auto into = run_gputrain({"export", out, "--out", out});
  CHECK(into.exit_code == 2);
  CHECK_THAT(into.output, Contains(holder) && Contains("or choose another --out"));
  CHECK_FALSE(fs::exists(out + "/model.safetensors"));
  auto from = run_gputrain({"export", out, "--out", dir.file("hf")});
  INFO(from.output);
  CHECK(from.exit_code == 0);
  auto prepare =
      run_gputrain({"data", "prepare", shared_data("tinyshakespeare.txt"), "-o", out, "--tokenizer", "bytes"});
  CHECK(prepare.exit_code == 2);
  CHECK_THAT(prepare.output, Contains(holder) && Contains("or use another --output"));
  CHECK_FALSE(fs::exists(out + "/train_000000.bin"));
  int status = 0;
  REQUIRE(::waitpid(pid, &status, WNOHANG) == 0);  // still paused, holding the folder
  failpoints.release("train.step_done");

  CHECK(wait_exit_code(pid) == 0);
  const std::string metrics = read_file(out + "/metrics.jsonl");
  CHECK(metrics.find('\0') == std::string::npos);
  const std::vector<nlohmann::json> lines = read_jsonl(out + "/metrics.jsonl");
  REQUIRE(lines.size() == static_cast<size_t>(steps));  // log_every 1: every step once, in order
  for (size_t i = 0; i < lines.size(); ++i) CHECK(lines[i]["step"] == static_cast<int64_t>(i + 1));
  const auto summary = read_json(out + "/summary.json");
  CHECK(summary["status"] == "ok");
  CHECK_FALSE(summary.contains("resumed_from_step"));
  CHECK(newest_checkpoint(out).filename() == step_dir(steps));
  CHECK_FALSE(fs::exists(fs::path(out) / kLockFileName));
}

TEST_CASE("checkpoint: corrupt and truncated checkpoints are passed over by auto and refused by path",
          "[checkpoint][cli]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), tiny_recipe());
  const std::string out = dir.file("out");
  REQUIRE(run_recipe(dir.file("r.yaml"), out, {"train.max_steps=6", "checkpoint.every=2", "checkpoint.keep_last=0"})
              .exit_code == 0);
  const fs::path root = fs::path(out) / "checkpoints";
  const fs::path s2 = root / "step_00000002", s4 = root / "step_00000004", s6 = root / "step_00000006";
  {  // one flipped byte in the newest
    std::fstream f(s6 / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-7, std::ios::end);
    const char c = static_cast<char>(f.get());
    f.seekp(-7, std::ios::end);
    f.put(static_cast<char>(c ^ 0x40));
  }
  fs::resize_file(s4 / "optimizer.safetensors", fs::file_size(s4 / "optimizer.safetensors") / 2);  // truncated

  auto r = run_recipe(dir.file("r.yaml"), out, {"train.max_steps=8", "checkpoint.every=2", "checkpoint.keep_last=0"});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("passing over " + s4.string() + ": optimizer.safetensors has"));
  CHECK_THAT(r.output, Contains("the manifest says"));
  CHECK_THAT(r.output, Contains("passing over " + s6.string()) && Contains("model.safetensors fails its checksum"));
  CHECK_THAT(r.output, Contains("resume: continuing from " + s2.string() + " at step 2"));
  // The metrics continue from step 2: every step once.
  std::vector<int64_t> steps;
  for (const auto& l : read_jsonl(out + "/metrics.jsonl")) steps.push_back(l["step"]);
  CHECK(steps == std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8});

  // Named explicitly, a bad checkpoint is an error with the reason (exit 2), and nothing is written.
  const auto before = read_file(out + "/metrics.jsonl");
  fs::resize_file(s2 / "model.safetensors", fs::file_size(s2 / "model.safetensors") - 1);
  auto named = run_recipe(dir.file("r.yaml"), out, {"train.max_steps=9", "checkpoint.resume=" + s2.string()});
  CHECK(named.exit_code == 2);
  CHECK_THAT(named.output, Contains("checkpoint.resume: '" + s2.string() +
                                    "' is not a usable checkpoint: "
                                    "model.safetensors has"));
  CHECK(read_file(out + "/metrics.jsonl") == before);
  // A byte flip is found when loading (the quick check reads only sizes).
  {
    std::fstream f(s4 / "trainer.json", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(3);
    f.put('#');
  }
  fs::resize_file(
      s4 / "optimizer.safetensors",
      read_json((s4 / "manifest.json").string())["files"]["optimizer.safetensors"]["bytes"].get<uint64_t>());
  auto flipped = run_recipe(dir.file("r.yaml"), out, {"train.max_steps=9", "checkpoint.resume=" + s4.string()});
  CHECK(flipped.exit_code == 2);
  CHECK_THAT(flipped.output, Contains("fails its checksum"));
  auto missing = run_recipe(dir.file("r.yaml"), out, {"checkpoint.resume=" + dir.file("nowhere")});
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.output, Contains("checkpoint.resume"));
  CHECK(read_file(out + "/metrics.jsonl") == before);
}

TEST_CASE("checkpoint: max_wall_time saves and stops with status preempted before the limit", "[checkpoint][cli]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), tiny_recipe());
  const std::string out = dir.file("out");
  auto r = run_recipe(dir.file("r.yaml"), out,
                      {"train.max_steps=100000000", "train.log_every=1000", "checkpoint.max_wall_time=6"});
  INFO(r.output);
  CHECK(r.exit_code == 143);
  CHECK_THAT(r.output, Contains("checkpoint.max_wall_time (6 s) is near"));
  auto s = read_json(out + "/summary.json");
  CHECK(s["status"] == "preempted");
  CHECK(s["stop_reason"] == "max_wall_time");
  CHECK(s["wall_s"].get<double>() < 6.0);
  // How many steps fit depends on the machine (CI's is slower than a workstation); that the run
  // went past its first step shows it used the time it had rather than stopping at once.
  CHECK(s["steps"].get<int64_t>() >= 2);
  CHECK(newest_checkpoint(out).filename() == step_dir(s["steps"].get<int64_t>()));
}

TEST_CASE("checkpoint: train.nan_policy abort names the parameter, skip drops the steps, warn applies them",
          "[checkpoint][cli]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), tiny_recipe());
  // Initial weights with one NaN, written in gputrain's own weight format.
  REQUIRE(run_recipe(dir.file("r.yaml"), dir.file("w"), {"train.max_steps=1"}).exit_code == 0);
  SafetensorsFile w = read_safetensors((newest_checkpoint(dir.file("w")) / "model.safetensors").string());
  at::Tensor target = *w.find("transformer.h.0.mlp.c_fc.weight");  // shares storage with w.tensors' entry
  target.view(-1)[7] = NAN;
  write_safetensors(dir.file("nan.safetensors"), w.tensors, w.metadata);

  const std::vector<std::string> base = {"model.init_from=" + dir.file("nan.safetensors"), "train.max_steps=3"};
  auto with = [&](const std::string& policy) {
    std::vector<std::string> sets = base;
    sets.push_back("train.nan_policy=" + policy);
    return run_recipe(dir.file("r.yaml"), dir.file(policy), sets);
  };
  auto abort = with("abort");
  CHECK(abort.exit_code == 1);
  CHECK_THAT(abort.output, Contains("step 1: loss nan"));
  CHECK_THAT(abort.output,
             Contains("first non-finite: parameter transformer.h.0.mlp.c_fc.weight (1 of 1024 values inf/nan)"));
  CHECK_THAT(abort.output, Contains("train.nan_policy: skip drops such steps"));
  CHECK(read_json(dir.file("abort") + "/summary.json")["status"] == "failed");

  auto skip = with("skip");
  INFO(skip.output);
  CHECK(skip.exit_code == 0);
  CHECK_THAT(skip.output, Contains("update skipped (train.nan_policy: skip)"));
  auto ss = read_json(dir.file("skip") + "/summary.json");
  CHECK(ss["skipped_steps"] == 3);
  CHECK(read_jsonl(dir.file("skip") + "/metrics.jsonl").back()["nan_skipped_steps"] == 3);
  // The weights were never updated: the NaN is where it was and nothing else moved.
  SafetensorsFile after = read_safetensors((newest_checkpoint(dir.file("skip")) / "model.safetensors").string());
  for (const auto& t : w.tensors) CHECK(at::equal(t.tensor.nan_to_num(), after.find(t.name)->nan_to_num()));

  auto warn = with("warn");
  CHECK(warn.exit_code == 0);
  CHECK_THAT(warn.output, Contains("update applied anyway (train.nan_policy: warn)"));
  CHECK(read_json(dir.file("warn") + "/summary.json")["status"] == "ok");
  // The updates were applied: every weight moved (the NaN gradients spread into each one).
  SafetensorsFile warned = read_safetensors((newest_checkpoint(dir.file("warn")) / "model.safetensors").string());
  REQUIRE(warned.tensors.size() == w.tensors.size());
  for (const auto& t : w.tensors) {
    INFO(t.name);
    CHECK_FALSE(at::equal(t.tensor.nan_to_num(), warned.find(t.name)->nan_to_num()));
  }
}

TEST_CASE("checkpoint: gputrain export writes Hugging Face files and refuses bad requests", "[checkpoint][cli]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), tiny_recipe());
  REQUIRE(run_recipe(dir.file("r.yaml"), dir.file("run"), {"train.max_steps=2"}).exit_code == 0);
  auto e = run_gputrain({"export", dir.file("run"), "--format", "hf", "--out", dir.file("hf")});
  INFO(e.output);
  CHECK(e.exit_code == 0);
  CHECK_THAT(e.output, Contains("exported step 2"));
  CHECK(read_json(dir.file("hf") + "/config.json")["model_type"] == "gpt2");
  check_export_logits(newest_checkpoint(dir.file("run")), dir.file("hf"), "GPT2LMHeadModel");  // transformers agrees
  auto again = run_gputrain({"export", dir.file("run"), "--format", "hf", "--out", dir.file("hf")});
  CHECK(again.exit_code == 2);
  CHECK_THAT(again.output, Contains("already holds model files"));
  CHECK(run_gputrain({"export", dir.file("run"), "--format", "hf", "--out", dir.file("hf"), "--overwrite"}).exit_code ==
        0);
  CHECK(run_gputrain({"export", dir.file("run"), "--format", "onnx", "--out", dir.file("x")}).exit_code == 2);
  auto none = run_gputrain({"export", dir.file("nowhere"), "--format", "hf", "--out", dir.file("y")});
  CHECK(none.exit_code == 2);
  CHECK_THAT(none.output, Contains("does not exist"));
  auto empty = run_gputrain({"export", dir.path().string(), "--format", "hf", "--out", dir.file("y")});
  CHECK(empty.exit_code == 2);
  CHECK_THAT(empty.output, Contains("holds no complete gputrain checkpoint"));
  // The exported weights start a new run: it holds the checkpoint's weights (a learning rate too small to move them).
  auto init = run_recipe(dir.file("r.yaml"), dir.file("ft"),
                         {"model.init_from=" + dir.file("hf"), "train.max_steps=1", "optim.lr=1e-12"});
  INFO(init.output);
  REQUIRE(init.exit_code == 0);
  CHECK_THAT(init.output, Contains("Hugging Face GPT-2 weights from"));
  check_same_tensors((newest_checkpoint(dir.file("run")) / "model.safetensors").string(),
                     (newest_checkpoint(dir.file("ft")) / "model.safetensors").string(), 1e-6);
}

TEST_CASE("checkpoint: keys are validated with clear errors", "[checkpoint][cli]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), tiny_recipe());
  auto bad = run_gputrain({"validate", dir.file("r.yaml"), "--set", "checkpoint.max_wall_time=3 hours", "--set",
                           "checkpoint.preempt_signals=[SIGKILL]", "--set", "checkpoint.keep_last=-1"});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.output, Contains("checkpoint.max_wall_time"));
  CHECK_THAT(bad.output, Contains("checkpoint.preempt_signals"));
  CHECK_THAT(bad.output, Contains("SIGKILL"));
  CHECK_THAT(bad.output, Contains("checkpoint.keep_last"));
  auto good = run_gputrain({"print-config", dir.file("r.yaml"), "--set", "checkpoint.max_wall_time=03:50:00", "--set",
                            "checkpoint.preempt_signals=[TERM, USR1]"});
  CHECK(good.exit_code == 0);
  CHECK_THAT(good.output, Contains("max_wall_time: 3h50m"));
  CHECK_THAT(good.output, Contains("preempt_signals: [SIGTERM, SIGUSR1]"));
}
