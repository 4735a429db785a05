// Multi-process training on this machine (Gloo): the launcher, data
// parallelism against one process, ZeRO, overlap of gradient reduction with
// backward, failures of a worker, and checkpoints of a data-parallel run.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/safetensors.h"
#include "export_reference.h"
#include "parallel_runs.h"
#include "same_tensors.h"
#include "test_util.h"
#include "util/dir_lock.h"

using namespace gputrain::test;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

// A loopback port no one listens on now (the kernel's pick for port 0), for a launcher that needs one named.
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// A restarted 2-process run of 10 steps, by its batch traces (GPUTRAIN_TRACE_BATCHES, appended across
// attempts): each rank trained no step up to `resumed_at` (the checkpoint continued from; 0: none) twice,
// and its last attempt trained steps resumed_at + 1 to 10 once each, in order, after an earlier attempt.
void check_trained_once_after_restart(const std::string& trace, int64_t resumed_at) {
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<int64_t> steps;
    for (const auto& b : read_jsonl(trace + "/rank" + std::to_string(rank) + ".jsonl"))
      if (b["micro"] == 0) steps.push_back(b["step"].get<int64_t>());
    std::string listed;
    for (int64_t s : steps) listed += " " + std::to_string(s);
    INFO("rank " << rank << " trained steps" << listed);
    for (int64_t s = 1; s <= resumed_at; ++s) CHECK(std::count(steps.begin(), steps.end(), s) == 1);
    const auto last = static_cast<std::ptrdiff_t>(10 - resumed_at);
    REQUIRE(static_cast<std::ptrdiff_t>(steps.size()) > last);
    std::vector<int64_t> want;
    for (int64_t s = resumed_at + 1; s <= 10; ++s) want.push_back(s);
    CHECK(std::vector<int64_t>(steps.end() - last, steps.end()) == want);
  }
}

// Starts the real torchrun (the tests' environment's: torch's launcher, its agent hosting the store) with
// 2 workers and --max-restarts 1, running `gputrain run recipe --output-dir out --set ...`; output in `log`.
int spawn_torchrun(const std::string& recipe, const std::string& out, const std::vector<std::string>& sets,
                   const std::string& log) {
  const std::string torchrun = (fs::path(GPUTRAIN_PYTHON).parent_path() / "torchrun").string();
  REQUIRE(fs::exists(torchrun));
  std::vector<std::string> args = {"--nproc-per-node",
                                   "2",
                                   "--max-restarts",
                                   "1",
                                   "--master-port",
                                   std::to_string(free_port()),
                                   "--no-python",
                                   GPUTRAIN_BINARY,
                                   "run",
                                   recipe,
                                   "--output-dir",
                                   out};
  for (const auto& s : sets) args.insert(args.end(), {"--set", s});
  const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int agent = spawn_program(torchrun, args, fd);
  close(fd);
  return agent;
}

}  // namespace

TEST_CASE("parallel: 2 processes match 1 process with the same global batch, ZeRO-1 and ZeRO-2 included",
          "[parallel][cli][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  REQUIRE(train(dir.file("r.yaml"), dir.file("one"), 0, {}).exit_code == 0);
  const auto loss1 = column(dir.file("one"), "loss");
  const auto norm1 = column(dir.file("one"), "grad_norm");
  REQUIRE(loss1.size() == 20);
  CHECK(loss1.back() < loss1.front() - 1.0);  // it learns

  // Tolerance 1e-5: the same sums in another order (float32 reductions over ranks).
  const std::vector<Variant> variants = {
      {"dp2", {"train.per_device_batch_size=2"}},
      {"dp2-accum", {"train.per_device_batch_size=1", "train.grad_accum_steps=2", "parallel.bucket_mb=0.01"}},
      {"zero1", {"train.per_device_batch_size=2", "parallel.zero=1", "parallel.bucket_mb=0.01"}},
      {"zero2", {"train.per_device_batch_size=2", "parallel.zero=2", "parallel.bucket_mb=0.01"}},
      // Recomputation runs backward re-entrantly; the gradient hooks still see every parameter once.
      {"zero2-recompute",
       {"train.per_device_batch_size=2", "parallel.zero=2", "parallel.bucket_mb=0.01",
        "train.gradient_checkpointing=full"}},
      // A world of one through the launcher takes the multi-process path (rendezvous, buckets).
      {"launched1", {"parallel.zero=1"}, 1},
  };
  for (const auto& v : variants) {
    SECTION(v.name) {
      const auto r = train_like_one_process(dir, dir.file("r.yaml"), v, loss1, norm1, 1e-5);
      INFO(r.output);
      const auto s = read_json(dir.file(v.name) + "/summary.json");
      CHECK(s["world_size"] == v.nproc);
      CHECK(s["tokens"] == read_json(dir.file("one") + "/summary.json")["tokens"]);
      REQUIRE(s["memory_per_rank"].size() == static_cast<size_t>(v.nproc));
      if (v.nproc == 1) {
        CHECK(s["grad_sync"]["buckets"].get<int>() >= 1);
        return;
      }
      const auto& m = s["memory_per_rank"];
      const double full_state = m[0]["weights_mb"].get<double>() * 2;  // AdamW: two fp32 moments
      if (std::string(v.name).rfind("zero", 0) == 0) {
        // Each rank holds about half of the optimizer state.
        for (int r = 0; r < 2; ++r) CHECK(m[r]["optimizer_state_mb"].get<double>() < 0.7 * full_state);
        CHECK(m[0]["optimizer_state_mb"].get<double>() + m[1]["optimizer_state_mb"].get<double>() ==
              Approx(full_state).epsilon(0.02));
      } else {
        CHECK(m[0]["optimizer_state_mb"].get<double>() == Approx(full_state).epsilon(0.02));
      }
      if (std::string(v.name).rfind("zero2", 0) == 0)
        for (int r = 0; r < 2; ++r) CHECK(m[r]["grads_mb"].get<double>() < 0.7 * m[r]["weights_mb"].get<double>());
      CHECK_THAT(r.output, Contains("[rank 0]"));
    }
  }
}

TEST_CASE("parallel: gradient buckets are reduced while backward still runs", "[parallel][cli][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  // Whether Gloo's threads get a core while backward runs is up to the scheduler: a failpoint holds
  // backward, once its second bucket is launched in step 1 (the profiled one), until the first bucket
  // is summed, so that all-reduce ran during backward for certain, on a loaded machine too.
  ArmedFailpoints failpoints("ddp.bucket_launched@2=act");
  auto r = train(dir.file("r.yaml"), dir.file("o"), 2,
                 {"model.n_layer=6", "model.d_model=128", "parallel.bucket_mb=0.1", "train.max_steps=5",
                  "metrics.profile_at=1", "metrics.profile_steps=1"});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto g = read_json(dir.file("o") + "/summary.json")["grad_sync"];
  INFO(g.dump());
  CHECK(g["buckets"].get<int>() >= 4);
  // Measured, not assumed: the first buckets started before backward returned.
  CHECK(g["started_during_backward"].get<int>() >= 1);
  CHECK(g["bucket_start_ms"][0].get<double>() < g["backward_ms"].get<double>());
  // And seen from outside, in the PyTorch profiler's trace of step 1: Gloo's own all-reduce events start
  // inside the span of autograd's backward functions (before any, the step's token count is summed;
  // after all, the loss).
  for (int rank : {0, 1}) {
    INFO("rank " << rank);
    const auto trace = read_json(dir.file("o") + "/profile/rank" + std::to_string(rank) + "/trace.json");
    double backward_start = INFINITY, backward_end = 0;
    std::vector<double> all_reduce_starts;
    for (const auto& e : trace.is_object() ? trace["traceEvents"] : trace) {
      if (e.value("ph", "") != "X") continue;
      const std::string name = e.value("name", "");
      const double ts = e["ts"].get<double>(), dur = e.value("dur", 0.0);
      if (name.rfind("autograd::engine::evaluate_function:", 0) == 0) {
        backward_start = std::min(backward_start, ts);
        backward_end = std::max(backward_end, ts + dur);
      }
      if (name == "gloo:all_reduce") all_reduce_starts.push_back(ts);
    }
    REQUIRE(backward_end > backward_start);
    int during = 0;
    for (const double ts : all_reduce_starts) during += ts > backward_start && ts < backward_end;
    CHECK(during >= 1);
    CHECK(during <= g["buckets"].get<int>());
  }
}

TEST_CASE("parallel: a killed worker makes the launcher stop the others and name it", "[parallel][cli][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  const std::string out = dir.file("o"), log = dir.file("log");
  // No collective timeout to fall back on: only the launcher noticing the death can end the run (were
  // it to wait, the test would hang until ctest's limit, and fail).
  const int launcher =
      spawn_launcher(dir.file("r.yaml"), out, 2, {"train.max_steps=10000000", "parallel.timeout_s=86400"}, log);
  KillOnExit guard({launcher});
  REQUIRE(wait_until([&] { return metric_lines(out) >= 3; }));
  const int victim = worker_pid(launcher, 1);
  REQUIRE(victim > 0);
  guard.add(worker_pid(launcher, 0));
  kill(victim, SIGKILL);
  const int code = wait_exit_code(launcher);
  const std::string output = read_file(log);
  INFO(output);
  CHECK(code != 0);
  CHECK_THAT(output, Contains("rank 1 failed (killed by signal 9"));
  CHECK_THAT(output, Contains("peer rank 1 stopped responding"));  // rank 0's own error names it too
}

TEST_CASE(
    "parallel: --max-restarts starts the workers again after one is SIGKILLed, and the run ends as an "
    "uninterrupted one",
    "[parallel][cli][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  const std::vector<std::string> sets = {"train.max_steps=10", "checkpoint.every=4"};
  const std::string straight = dir.file("straight");
  REQUIRE(train(dir.file("r.yaml"), straight, 2, sets).exit_code == 0);

  // Both workers wait after their n-th step (a restarted one passes that point again, released by then),
  // and one is killed there: after the step-4 checkpoint, and before any.
  for (const auto& [step, how] :
       {std::pair{6, "from the newest checkpoint"}, {2, "no checkpoint yet: from the start"}}) {
    INFO(how);
    const std::string out = dir.file("o" + std::to_string(step)), log = out + ".log", trace = out + "-trace";
    ArmedFailpoints failpoints("train.step_done@" + std::to_string(step) + "=pause");
    // What each attempt trained on, appended across attempts (train/batch_trace.h).
    ScopedEnv traced("GPUTRAIN_TRACE_BATCHES", trace);
    const int launcher = spawn_launcher(dir.file("r.yaml"), out, 2, sets, log, {"--max-restarts", "1"});
    KillOnExit guard({launcher});
    const std::vector<int> paused = failpoints.wait_paused("train.step_done", launcher, 2);
    REQUIRE(paused.size() == 2);
    kill(paused[1], SIGKILL);
    failpoints.release("train.step_done");
    const int code = wait_exit_code(launcher);
    const std::string output = read_file(log);
    INFO(output);
    CHECK(code == 0);
    CHECK_THAT(output, Contains("failed (killed by signal 9"));
    CHECK_THAT(output, Contains(std::string("restart 1 of 1: starting the workers again (") + how + ")"));
    // Every step once, as the uninterrupted run logged it.
    CHECK(step_records(out) == step_records(straight));
    CHECK(read_json(out + "/summary.json")["steps"] == 10);
    // How: the second attempt read the newest checkpoint (step 4) and went on from it, so each rank
    // computed no step up to it twice; the attempt after an early failure started again at step 1.
    const int resumed_at = step == 6 ? 4 : 0;
    if (resumed_at > 0) {
      CHECK_THAT(output, Contains("resume: continuing from " + out + "/checkpoints/step_00000004 at step 4"));
      CHECK(read_json(out + "/summary.json")["resumed_from_step"] == 4);
    } else {
      CHECK_THAT(output, !Contains("resume: continuing from"));
    }
    check_trained_once_after_restart(trace, resumed_at);
  }
}

TEST_CASE(
    "parallel: under the real torchrun --max-restarts 1, the restarted group resumes from the newest checkpoint, or "
    "starts again before the first",
    "[parallel][cli][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  const std::vector<std::string> sets = {"train.max_steps=10", "checkpoint.every=4"};
  const std::string straight = dir.file("straight");
  REQUIRE(train(dir.file("r.yaml"), straight, 2, sets).exit_code == 0);
  // Both workers wait after step n; one is SIGKILLed there: past the step-4 checkpoint, and before it.
  for (const int step : {6, 2}) {
    CAPTURE(step);
    const int resumed_at = step == 6 ? 4 : 0;
    const std::string out = dir.file("o" + std::to_string(step)), log = out + ".log", trace = out + "-trace";
    ArmedFailpoints failpoints("train.step_done@" + std::to_string(step) + "=pause");
    ScopedEnv traced("GPUTRAIN_TRACE_BATCHES", trace);
    const int agent = spawn_torchrun(dir.file("r.yaml"), out, sets, log);
    KillOnExit guard({agent});
    const std::vector<int> paused = failpoints.wait_paused("train.step_done", agent, 2);
    REQUIRE(paused.size() == 2);
    for (int pid : paused) guard.add(pid);
    kill(paused[1], SIGKILL);
    failpoints.release("train.step_done");
    const int code = wait_exit_code(agent);
    const std::string output = read_file(log);
    INFO(output);
    CHECK(code == 0);
    CHECK_THAT(output, Contains("(torchrun's store, attempt 1)"));
    if (resumed_at > 0) {
      CHECK_THAT(output, Contains("resume: continuing from " + out + "/checkpoints/step_00000004 at step 4"));
      CHECK(read_json(out + "/summary.json")["resumed_from_step"] == 4);
    } else {
      CHECK_THAT(output, Contains("torchrun attempt 1: no checkpoint to continue from, so training starts again"));
      CHECK_FALSE(read_json(out + "/summary.json").contains("resumed_from_step"));
    }
    // Every step once, as the uninterrupted run logged it, and no step up to the checkpoint trained twice.
    CHECK(step_records(out) == step_records(straight));
    check_trained_once_after_restart(trace, resumed_at);
  }
  // A folder another run left (no torchrun attempt of this agent wrote it) is still refused, and kept.
  const std::string theirs = dir.file("o2") + "/metrics.jsonl", before = read_file(theirs);
  const int agent =
      spawn_torchrun(dir.file("r.yaml"), dir.file("o2"), {"checkpoint.resume=never"}, dir.file("again.log"));
  KillOnExit guard({agent});
  CHECK(wait_exit_code(agent) != 0);
  const std::string output = read_file(dir.file("again.log"));
  INFO(output);
  CHECK_THAT(output, Contains("already holds a run"));
  CHECK(read_file(theirs) == before);
}

TEST_CASE("parallel: --max-restarts N restarts exactly N times when every attempt fails, and 0 restarts none",
          "[parallel][cli][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  for (int n : {2, 0}) {
    INFO("--max-restarts " << n);
    const std::string out = dir.file("o" + std::to_string(n)), log = out + ".log";
    // Every attempt's workers die at their second step: N + 1 failures.
    ArmedFailpoints failpoints("train.step_done@2=kill");
    const int launcher =
        spawn_launcher(dir.file("r.yaml"), out, 2, {"train.max_steps=10"}, log, {"--max-restarts", std::to_string(n)});
    KillOnExit guard({launcher});
    const int code = wait_exit_code(launcher);
    const std::string output = read_file(log);
    INFO(output);
    CHECK(code == 1);  // a worker killed by a signal: the launcher's exit code 1, as torchrun's
    auto count = [&](const std::string& what) {
      int64_t c = 0;
      for (size_t at = output.find(what); at != std::string::npos; at = output.find(what, at + 1)) ++c;
      return c;
    };
    // Each attempt logged: its rank 0's start, its failure, and the restart after all but the last.
    CHECK(count("train: 10 steps x") == n + 1);
    CHECK(count("gputrain launcher: failed: rank ") == n + 1);
    CHECK(count("starting the workers again") == n);
    for (int k = 1; k <= n; ++k)
      CHECK_THAT(output, Contains("restart " + std::to_string(k) + " of " + std::to_string(n) + ": starting"));
    CHECK(failpoints.fired("train.step_done") >= static_cast<size_t>(n + 1));
  }
}

TEST_CASE("parallel: --max-restarts is refused across nodes", "[parallel][cli]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  auto r = run_gputrain({"run", dir.file("r.yaml"), "--nnodes", "2", "--node-rank", "0", "--master-addr", "127.0.0.1",
                         "--max-restarts", "3"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Contains("--max-restarts restarts the workers of one node") && Contains("sbatch --requeue"));
}

TEST_CASE("parallel: workers of a launcher killed with SIGKILL save and stop as preempted", "[parallel][cli][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  const std::string out = dir.file("o"), log = dir.file("log");
  const int launcher = spawn_launcher(dir.file("r.yaml"), out, 2, {"train.max_steps=10000000"}, log);
  REQUIRE(wait_until([&] { return metric_lines(out) >= 3; }));
  // The workers outlive their launcher: should they not stop, the guard stops them with the test.
  KillOnExit guard({worker_pid(launcher, 0), worker_pid(launcher, 1)});
  kill(launcher, SIGKILL);
  CHECK(wait_exit_code(launcher) == 128 + SIGKILL);
  // The workers (no longer anyone's children here) get SIGTERM from the kernel and save.
  REQUIRE(wait_until([&] { return fs::exists(out + "/summary.json"); }));
  const auto s = read_json(out + "/summary.json");
  CHECK(s["status"] == "preempted");
  CHECK(fs::exists(fs::path(out) / "checkpoints" /
                   ("step_" + std::string(8 - std::to_string(s["steps"].get<int>()).size(), '0') +
                    std::to_string(s["steps"].get<int>()))));
}

TEST_CASE(
    "parallel: a second launched run into a live one's folder exits 2, and once it is SIGKILLed the "
    "folder is free at once",
    "[parallel][cli][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  const std::string out = dir.file("o");
  const fs::path root = fs::path(out) / "checkpoints";
  const int launcher =
      spawn_launcher(dir.file("r.yaml"), out, 2, {"train.max_steps=10000000", "checkpoint.every=5"}, dir.file("log"));
  KillOnExit guard({launcher});
  REQUIRE(wait_until([&] { return !gputrain::list_checkpoints(root).complete.empty(); }));
  const int rank0 = worker_pid(launcher, 0), rank1 = worker_pid(launcher, 1);
  REQUIRE(rank0 > 0);
  REQUIRE(rank1 > 0);
  guard.add(rank0);
  guard.add(rank1);
  // Rank 0 holds the folder, not the launcher; the second launcher's rank 0 is refused, and that
  // launcher stops its other rank (while the first run, endless, still holds the folder).
  auto second = train(dir.file("r.yaml"), out, 2, {"train.max_steps=10000000"});
  INFO(second.output);
  CHECK(second.exit_code == 2);
  CHECK_THAT(second.output, Contains("'" + out + "' is in use by gputrain pid " + std::to_string(rank0) + " on host "));
  int status = 0;
  CHECK(::waitpid(launcher, &status, WNOHANG) == 0);

  // SIGKILL the whole first run (workers first: a launcher's death alone makes them save and stop gracefully).
  kill(rank0, SIGKILL);
  kill(rank1, SIGKILL);
  kill(launcher, SIGKILL);
  wait_exit_code(launcher);
  const auto stale = gputrain::read_lock_holder(fs::path(out) / gputrain::kLockFileName);
  REQUIRE(stale);
  CHECK(stale->pid == rank0);  // the record stays; the lock went with the process
  const gputrain::CheckpointListing saved = gputrain::list_checkpoints(root, gputrain::CheckpointCheck::kChecksums);
  REQUIRE_FALSE(saved.complete.empty());
  const int64_t newest = std::stoll(saved.complete.back().filename().string().substr(5));
  auto third = train(dir.file("r.yaml"), out, 2, {"train.max_steps=" + std::to_string(newest + 3)});
  INFO(third.output);
  REQUIRE(third.exit_code == 0);
  const auto s = read_json(out + "/summary.json");
  CHECK(s["resumed_from_step"] == newest);
  CHECK(s["steps"] == newest + 3);
  CHECK_FALSE(fs::exists(fs::path(out) / gputrain::kLockFileName));
}

TEST_CASE("parallel: a hung worker ends the run within parallel.timeout_s with the collective named",
          "[parallel][cli][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  const std::string out = dir.file("o"), log = dir.file("log");
  const int launcher =
      spawn_launcher(dir.file("r.yaml"), out, 2, {"train.max_steps=10000000", "parallel.timeout_s=3"}, log);
  KillOnExit guard({launcher});
  REQUIRE(wait_until([&] { return metric_lines(out) >= 3; }));
  const int victim = worker_pid(launcher, 1);
  REQUIRE(victim > 0);
  guard.add(victim);
  guard.add(worker_pid(launcher, 0));
  const auto stopped = std::chrono::steady_clock::now();
  kill(victim, SIGSTOP);  // alive but silent: no connection breaks, only the timeout can tell
  // The run ends, and its messages say it was the timeout that ended it.
  const int code = wait_exit_code(launcher);
  // A timeout is about time, so here (only here) the clock bounds a result, from above and generously:
  // the 3 s timeout, 2.5 s of reading heartbeats, and the launcher stopping the others (measured about
  // 6 s on 2 cores), within 10x the timeout. A timeout applied 60 times too long fails it.
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped).count();
  const std::string output = read_file(log);
  INFO(output);
  INFO("the run ended " << elapsed << " s after rank 1 stopped");
  CHECK(elapsed < 30);
  CHECK(code == 1);
  // The rank that noticed and the collective it waited in, by name (the step's gradient all-reduce,
  // or the loss's when it was there).
  std::smatch named;
  CHECK(std::regex_search(output, named,
                          std::regex(R"(rank 0: (gradient bucket \d+ of \d+ \(all-reduce\)|sum of the step's [a-z ]+) )"
                                     R"(\(gloo\) failed: peer rank 1 stopped responding)")));
  CHECK_THAT(output, Contains("parallel.timeout_s (3 s)"));
  CHECK_THAT(output, Contains("rank 0 failed (exit code 1)"));
}

TEST_CASE("parallel: SIGTERM to the launcher saves, and a ZeRO-2 run resumes exactly, also on another world size",
          "[parallel][cli][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  const std::vector<std::string> zero2 = {"train.per_device_batch_size=2", "parallel.zero=2", "train.max_steps=40",
                                          "optim.schedule.decay_steps=40"};
  REQUIRE(train(dir.file("r.yaml"), dir.file("straight"), 2, zero2).exit_code == 0);

  const std::string out = dir.file("stopped"), log = dir.file("log");
  const int launcher = spawn_launcher(dir.file("r.yaml"), out, 2, zero2, log);
  REQUIRE(wait_until([&] { return metric_lines(out) >= 3; }));
  kill(launcher, SIGTERM);
  const int code = wait_exit_code(launcher);
  INFO(read_file(log));
  REQUIRE(code == 143);
  const auto stopped = read_json(out + "/summary.json");
  CHECK(stopped["status"] == "preempted");
  REQUIRE(stopped["steps"].get<int>() < 40);

  auto resumed = train(dir.file("r.yaml"), out, 2, zero2);
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  CHECK_THAT(resumed.output, Contains("resume: continuing from"));
  // Bitwise: the same weights and the same optimizer state (each rank's share) as the uninterrupted run.
  const fs::path a = fs::path(dir.file("straight")) / "checkpoints/step_00000040";
  const fs::path b = fs::path(out) / "checkpoints/step_00000040";
  const auto files = check_same_state_files(a, b);
  CHECK(files == std::vector<std::string>{"model.rank0.safetensors", "optimizer.rank0.safetensors",
                                          "optimizer.rank1.safetensors"});
  CHECK(column(out, "loss") == column(dir.file("straight"), "loss"));

  // One process continues the two-process checkpoint: the gathered state needs no re-sharding.
  auto single = train(
      dir.file("r.yaml"), dir.file("single"), 0,
      {"train.per_device_batch_size=4", "train.max_steps=40", "optim.schedule.decay_steps=40",
       "checkpoint.resume=" + (fs::path(out) / "checkpoints" /
                               ("step_" + std::string(8 - std::to_string(stopped["steps"].get<int>()).size(), '0') +
                                std::to_string(stopped["steps"].get<int>())))
                                  .string()});
  INFO(single.output);
  REQUIRE(single.exit_code == 0);
  CHECK_THAT(single.output, Contains("parallel.dp changed from 2 to 1"));
  check_continues(column(dir.file("straight"), "loss"), column(dir.file("single"), "loss"),
                  40 - static_cast<size_t>(stopped["steps"].get<int>()), 1e-5);
}

TEST_CASE("parallel: wrong launcher variables, world sizes and ports are clear errors", "[parallel][cli]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  setenv("RANK", "3", 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  auto bad_rank = train(dir.file("r.yaml"), dir.file("a"), 0, {});
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  unsetenv("MASTER_ADDR");
  CHECK(bad_rank.exit_code == 2);
  CHECK_THAT(bad_rank.output, Contains("rank 3 is outside a world of 2"));

  auto bad_dp = train(dir.file("r.yaml"), dir.file("b"), 2, {"parallel.dp=3"});
  CHECK(bad_dp.exit_code == 2);
  CHECK_THAT(bad_dp.output, Contains("parallel.dp (3) x tp (1) x pp (1) = 3 must equal the number of processes (2)"));

  auto bad_tp = train(dir.file("r.yaml"), dir.file("c"), 0, {"parallel.tp=2"});
  CHECK(bad_tp.exit_code == 2);
  CHECK_THAT(bad_tp.output, Contains("parallel.tp"));

  // A port someone else listens on.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(listen(fd, 1) == 0);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const std::string port = std::to_string(ntohs(addr.sin_port));
  auto busy = run_gputrain({"run", dir.file("r.yaml"), "--output-dir", dir.file("d"), "--nproc-per-node", "2",
                            "--master-port", port, "--set", "parallel.timeout_s=5"});
  close(fd);
  INFO(busy.output);
  CHECK(busy.exit_code == 2);
  CHECK_THAT(busy.output, Contains("cannot listen on 127.0.0.1:" + port + ": the port is in use"));

  // Rank 1 with nobody at the rendezvous address: an error naming it, after parallel.timeout_s.
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", port.c_str(), 1);  // closed above: nothing listens there now
  auto unreachable = train(dir.file("r.yaml"), dir.file("e"), 0, {"parallel.timeout_s=2"});
  for (const char* v : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) unsetenv(v);
  INFO(unreachable.output);
  CHECK(unreachable.exit_code == 1);
  CHECK_THAT(unreachable.output,
             Contains("rank 1 could not reach rank 0's store at 127.0.0.1:" + port + " within 2 s"));

  auto bad_node = run_gputrain({"run", dir.file("r.yaml"), "--nnodes", "2", "--node-rank", "0"});
  CHECK(bad_node.exit_code == 2);
  CHECK_THAT(bad_node.output, Contains("--master-addr"));
}

TEST_CASE("parallel: train.global_batch_size counts every process", "[parallel][cli]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  // 2 processes x batch 2 = 4: consistent. 2 is not.
  auto ok = train(dir.file("r.yaml"), dir.file("a"), 2,
                  {"train.per_device_batch_size=2", "train.global_batch_size=4", "train.max_steps=2"});
  INFO(ok.output);
  CHECK(ok.exit_code == 0);
  auto bad = train(dir.file("r.yaml"), dir.file("b"), 2,
                   {"train.per_device_batch_size=2", "train.global_batch_size=2", "train.max_steps=2"});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.output, Contains("train.global_batch_size (2) is not per_device_batch_size x grad_accum_steps x the 2 "
                                  "processes (4)"));
  // Batch size auto splits the global batch over the processes first.
  auto split = train(dir.file("r.yaml"), dir.file("c"), 2,
                     {"train.per_device_batch_size=auto", "train.global_batch_size=8", "train.max_steps=2"});
  INFO(split.output);
  REQUIRE(split.exit_code == 0);
  const auto s = read_json(dir.file("c") + "/summary.json");
  CHECK(s["per_device_batch_size"].get<int>() * s["grad_accum_steps"].get<int>() == 4);
  CHECK(s["tokens"] == 2 * 8 * 32);
  CHECK_THAT(read_file(dir.file("c") + "/recipe.resolved.yaml"), Contains("global_batch_size: 8"));
  auto odd = train(dir.file("r.yaml"), dir.file("d"), 2,
                   {"train.per_device_batch_size=auto", "train.global_batch_size=7", "train.max_steps=2"});
  CHECK(odd.exit_code == 2);
  CHECK_THAT(odd.output, Contains("must divide evenly over the 2 data-parallel processes"));
}

TEST_CASE("parallel cli: plan --world-size prints the dp x pp x tp grid and the pipeline schedule", "[parallel][cli]") {
  auto r = run_gputrain({"plan", "--world-size", "8", "--set", "parallel.tp=2", "--set", "parallel.pp=2", "--set",
                         "train.grad_accum_steps=8"});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("parallel grid: dp 2 x pp 2 x tp 2 = 8 processes"));
  CHECK_THAT(r.output, Contains("| 0 | 1 | 1, 3 | embeddings, blocks 0-"));  // stage 0, tp shard 1: ranks 1 and 3
  CHECK_THAT(r.output, Contains("ln_f, head + loss"));
  CHECK_THAT(r.output, Contains("pipeline: 8 micro-batches"));
  CHECK_THAT(r.output, Contains("= 11.1%"));  // (2 - 1) / (8 + 2 - 1)
  CHECK_THAT(r.output, Contains("| 0 | 0-"));
  // A world the degrees cannot fill, and degrees the model cannot take: exit 2 naming the key.
  auto bad = run_gputrain({"plan", "--world-size", "6", "--set", "parallel.tp=4"});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.output, Contains("parallel.tp (4) x pp (1) = 4 does not divide the number of processes (6)"));
  auto heads = run_gputrain({"plan", "--set", "parallel.tp=5"});
  CHECK(heads.exit_code == 2);
  CHECK_THAT(heads.output, Contains("parallel.tp: (5) must divide model.n_head"));
  auto deep = run_gputrain({"plan", "--set", "parallel.pp=99"});
  CHECK(deep.exit_code == 2);
  CHECK_THAT(deep.output, Contains("parallel.pp: (99) exceeds model.n_layer"));
}

// Tensor parallelism: the split layers' partial sums meet in another order,
// so float32 results differ in the last bits (kReorderedSums).
TEST_CASE("parallel: tensor parallelism (tp 2, dp 2 x tp 2, with ZeRO-2 and recomputation) matches 1 process",
          "[parallel][cli][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  REQUIRE(train(dir.file("r.yaml"), dir.file("one"), 0, {}).exit_code == 0);
  const auto loss1 = column(dir.file("one"), "loss");
  const auto norm1 = column(dir.file("one"), "grad_norm");
  const double weights1 =
      read_json(dir.file("one") + "/summary.json")["memory_per_rank"][0]["weights_mb"].get<double>();
  const std::vector<Variant> variants = {
      {"tp2", {"parallel.tp=2"}, 2},
      {"tp2-recompute-clip", {"parallel.tp=2", "train.gradient_checkpointing=full"}, 2},
      {"dp2-tp2", {"parallel.tp=2", "train.per_device_batch_size=2"}, 4},
      {"dp2-tp2-zero2",
       {"parallel.tp=2", "train.per_device_batch_size=2", "parallel.zero=2", "parallel.bucket_mb=0.01"},
       4},
  };
  for (const auto& v : variants) {
    SECTION(v.name) {
      const auto r = train_like_one_process(dir, dir.file("r.yaml"), v, loss1, norm1, kReorderedSums);
      INFO(r.output);
      const auto s = read_json(dir.file(v.name) + "/summary.json");
      CHECK(s["grid"]["tp"] == 2);
      CHECK(s["grid"]["dp"] == v.nproc / 2);
      CHECK(s["parameters"] == read_json(dir.file("one") + "/summary.json")["parameters"]);  // the whole model's
      CHECK(s["tokens"] == read_json(dir.file("one") + "/summary.json")["tokens"]);
      // Each tp rank holds its half of the split layers (embeddings and norms stay whole).
      REQUIRE(s["memory_per_rank"].size() == static_cast<size_t>(v.nproc));
      for (const auto& m : s["memory_per_rank"]) CHECK(m["weights_mb"].get<double>() < 0.8 * weights1);
      CHECK_THAT(r.output, Contains("tensor parallel: 12 of 28 parameter tensors split over 2 ranks"));
    }
  }
}

TEST_CASE("parallel: LoRA under tensor parallelism (tp 2, dp 2 x tp 2 with ZeRO-3) matches 1 process and resumes on 1",
          "[parallel][cli][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  // Adapters on every split layer: column-parallel c_attn and c_fc (lora_B split by rows),
  // row-parallel c_proj (lora_A split by columns), adapters-only checkpoints.
  const std::vector<std::string> lora = {"model.lora.rank=4", "model.lora.alpha=8",
                                         "model.lora.targets=[qkv, proj, mlp_up, mlp_down]", "optim.lr=1e-2",
                                         "checkpoint.every=10"};
  REQUIRE(train(dir.file("r.yaml"), dir.file("one"), 0, lora).exit_code == 0);
  const auto loss1 = column(dir.file("one"), "loss");
  const auto norm1 = column(dir.file("one"), "grad_norm");
  const std::vector<Variant> variants = {
      {"tp2", with(lora, {"parallel.tp=2"}), 2},
      {"dp2-tp2-zero3", with(lora, {"parallel.tp=2", "train.per_device_batch_size=2", "parallel.zero=3"}), 4},
  };
  for (const auto& v : variants) {
    SECTION(v.name) {
      const auto r = train_like_one_process(dir, dir.file("r.yaml"), v, loss1, norm1, kReorderedSums);
      INFO(r.output);
      // The adapters split with their layers: 12 base tensors and the 8 lora_B / lora_A that follow them.
      CHECK_THAT(r.output, Contains("tensor parallel: 20 of 44 parameter tensors split over 2 ranks"));
    }
  }
  SECTION("resume and export") {
    REQUIRE(train(dir.file("r.yaml"), dir.file("tp2"), 2, with(lora, {"parallel.tp=2"})).exit_code == 0);
    // The tp 2 checkpoint's adapters, joined, continue on one process; a 1-process one continues under tp 2.
    const std::string step10 = dir.file("tp2") + "/checkpoints/step_00000010";
    train_resumed(dir.file("r.yaml"), dir.file("to-one"), 0, with_resume(lora, step10), column(dir.file("tp2"), "loss"),
                  10, 1e-5);
    train_resumed(dir.file("r.yaml"), dir.file("to-two"), 2,
                  with(with_resume(lora, dir.file("one") + "/checkpoints/step_00000010"), {"parallel.tp=2"}), loss1, 10,
                  1e-5);
    // Merged into its base, the tp 2 run exports the 1-process run's model.
    REQUIRE(run_gputrain({"export", dir.file("one"), "--out", dir.file("hf-one"), "--merge-lora"}).exit_code == 0);
    const auto e = run_gputrain({"export", dir.file("tp2"), "--out", dir.file("hf-tp2"), "--merge-lora"});
    INFO(e.output);
    REQUIRE(e.exit_code == 0);
    check_same_tensors(dir.file("hf-one") + "/model.safetensors", dir.file("hf-tp2") + "/model.safetensors", 1e-4);
  }
}

static double loss1_first(const std::string& out) { return column(out, "loss").front(); }

TEST_CASE("parallel: a tensor-parallel checkpoint is a file per rank, exports the 1-process model and resumes exactly",
          "[parallel][cli][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  const std::vector<std::string> every10 = {"checkpoint.every=10"};
  REQUIRE(train(dir.file("r.yaml"), dir.file("one"), 0, every10).exit_code == 0);
  std::vector<std::string> tp2 = every10;
  tp2.push_back("parallel.tp=2");
  auto r = train(dir.file("r.yaml"), dir.file("tp2"), 2, tp2);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);

  const fs::path ckpt = fs::path(dir.file("tp2")) / "checkpoints/step_00000020";
  // Each rank wrote its own shard; the metadata say which tp rank it is.
  for (const char* f : {"model.rank0.safetensors", "model.rank1.safetensors", "optimizer.rank0.safetensors",
                        "optimizer.rank1.safetensors"}) {
    CHECK(fs::exists(ckpt / f));
    CHECK(read_json(ckpt / "manifest.json").dump().find(f) != std::string::npos);
  }
  CHECK(gputrain::read_safetensors((ckpt / "model.rank1.safetensors").string()).metadata.at("tp_rank") == "1");
  CHECK_FALSE(fs::exists(ckpt / "model.safetensors"));
  CHECK(read_json(ckpt / "trainer.json")["tensor_parallel"]["size"] == 2);

  // Export joins the shards: the same Hugging Face tensors as the 1-process run's, to float32 noise.
  REQUIRE(run_gputrain({"export", dir.file("one"), "--out", dir.file("hf-one")}).exit_code == 0);
  auto e = run_gputrain({"export", dir.file("tp2"), "--out", dir.file("hf-tp2")});
  INFO(e.output);
  REQUIRE(e.exit_code == 0);
  check_same_tensors(dir.file("hf-one") + "/model.safetensors", dir.file("hf-tp2") + "/model.safetensors", 1e-4);

  // Resumed at step 10 under the same tp, the run continues exactly.
  auto resumed = train(dir.file("r.yaml"), dir.file("resumed"), 2,
                       {"parallel.tp=2", "checkpoint.resume=" + dir.file("tp2") + "/checkpoints/step_00000010"});
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  check_continues(column(dir.file("tp2"), "loss"), column(dir.file("resumed"), "loss"), 10, 0);

  // Another tp reshards the weights and the (elementwise) optimizer state: tp 2 -> 1 process, and a
  // 1-process checkpoint -> tp 2, each continues within float32 noise of the uninterrupted run.
  const std::string step10 = dir.file("tp2") + "/checkpoints/step_00000010";
  auto to_one = train(dir.file("r.yaml"), dir.file("to-one"), 0, {"checkpoint.resume=" + step10});
  INFO(to_one.output);
  REQUIRE(to_one.exit_code == 0);
  CHECK_THAT(to_one.output, Contains("parallel.tp changed from 2 to 1"));
  check_continues(column(dir.file("tp2"), "loss"), column(dir.file("to-one"), "loss"), 10, 1e-5);
  auto to_two = train(dir.file("r.yaml"), dir.file("to-two"), 2,
                      {"parallel.tp=2", "checkpoint.resume=" + dir.file("one") + "/checkpoints/step_00000010"});
  INFO(to_two.output);
  REQUIRE(to_two.exit_code == 0);
  check_continues(column(dir.file("one"), "loss"), column(dir.file("to-two"), "loss"), 10, 1e-5);
  // Adafactor's factored statistics differ between tp ranks: another tp is refused by name.
  REQUIRE(train(dir.file("r.yaml"), dir.file("ada"), 2, {"parallel.tp=2", "optim.name=adafactor", "train.max_steps=2"})
              .exit_code == 0);
  auto ada = train(dir.file("r.yaml"), dir.file("ada-one"), 0,
                   {"optim.name=adafactor", "checkpoint.resume=" + dir.file("ada") + "/checkpoints/step_00000002"});
  CHECK(ada.exit_code != 0);
  CHECK_THAT(ada.output,
             Contains("differs between its tp ranks") && Contains("resume with the checkpoint's parallel.tp (2)"));

  // Checkpoints written before per-rank files (model.tp<r>.safetensors) still resume.
  const fs::path old = dir.file("old");
  fs::copy(step10, old);
  auto manifest = read_json((old / "manifest.json").string());
  for (const char* stem : {"model", "optimizer"})
    for (int r = 0; r < 2; ++r) {
      const std::string from = std::string(stem) + ".rank" + std::to_string(r) + ".safetensors";
      const std::string to = std::string(stem) + ".tp" + std::to_string(r) + ".safetensors";
      fs::rename(old / from, old / to);
      manifest["files"][to] = manifest["files"][from];
      manifest["files"].erase(from);
    }
  auto trainer = read_json((old / "trainer.json").string());
  trainer.erase("ranks");
  write_file((old / "trainer.json").string(), trainer.dump(2));
  manifest["files"]["trainer.json"] = {{"bytes", fs::file_size(old / "trainer.json")},
                                       {"crc32c", gputrain::file_crc32c(old / "trainer.json")}};
  write_file((old / "manifest.json").string(), manifest.dump(2));
  auto from_old =
      train(dir.file("r.yaml"), dir.file("from-old"), 2, {"parallel.tp=2", "checkpoint.resume=" + old.string()});
  INFO(from_old.output);
  REQUIRE(from_old.exit_code == 0);
  check_continues(column(dir.file("tp2"), "loss"), column(dir.file("from-old"), "loss"), 10, 0);

  auto init = train(dir.file("r.yaml"), dir.file("init"), 0, {"model.init_from=" + ckpt.string(), "train.max_steps=2"});
  INFO(init.output);
  CHECK(init.exit_code == 0);
  CHECK(column(dir.file("init"), "loss").front() < loss1_first(dir.file("one")) - 1.0);  // trained weights
}

// Pipeline parallelism: the stages' micro-batch gradients are accumulated in
// the same order as one process's, so only the tied embedding's sum over the
// two ends and the norm's sum over ranks differ in the last bits.
TEST_CASE("parallel: pipeline parallelism (pp 2 under 1f1b and gpipe, dp 2 x tp 2 x pp 2) matches 1 process",
          "[parallel][cli][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  REQUIRE(train(dir.file("r.yaml"), dir.file("one"), 0, {}).exit_code == 0);
  const auto loss1 = column(dir.file("one"), "loss");
  const auto norm1 = column(dir.file("one"), "grad_norm");
  const std::vector<std::string> four_micro = {"parallel.pp=2", "train.per_device_batch_size=1",
                                               "train.grad_accum_steps=4"};
  SECTION("1f1b and gpipe") {
    const Variant f1b{"pp2-1f1b", four_micro, 2},
        gpipe{"pp2-gpipe", with(four_micro, {"parallel.pp_schedule=gpipe"}), 2};
    const auto r = train_like_one_process(dir, dir.file("r.yaml"), f1b, loss1, norm1, kReorderedSums);
    CHECK_THAT(r.output, Contains("pipeline: stage 0 of 2 runs blocks [0, 1) and the embeddings, 1f1b schedule"));
    train_like_one_process(dir, dir.file("r.yaml"), gpipe, loss1, norm1, kReorderedSums);
    // The schedules order the same work differently: the same numbers.
    CHECK(column(dir.file("pp2-1f1b"), "loss") == column(dir.file("pp2-gpipe"), "loss"));
    CHECK(column(dir.file("pp2-1f1b"), "grad_norm") == column(dir.file("pp2-gpipe"), "grad_norm"));
    const auto s1 = read_json(dir.file("pp2-1f1b") + "/summary.json"),
               sg = read_json(dir.file("pp2-gpipe") + "/summary.json");
    CHECK(s1["grid"]["pp"] == 2);
    CHECK(s1["pipeline"]["micro_batches"] == 4);
    CHECK(s1["pipeline"]["bubble_fraction"].get<double>() == Approx(0.2));  // (2 - 1) / (4 + 2 - 1)
    CHECK(s1["pipeline"]["stage_blocks"] == nlohmann::json::parse("[[0, 1], [1, 2]]"));
    CHECK(s1["tokens"] == read_json(dir.file("one") + "/summary.json")["tokens"]);
    CHECK(s1["parameters"] == read_json(dir.file("one") + "/summary.json")["parameters"]);
    // 1f1b: stage s holds pp - s micro-batches at its peak; gpipe all 4.
    CHECK(s1["memory_per_rank"][0]["micro_batches_held"] == 2);
    CHECK(s1["memory_per_rank"][1]["micro_batches_held"] == 1);
    CHECK(sg["memory_per_rank"][0]["micro_batches_held"] == 4);
    CHECK(sg["memory_per_rank"][1]["micro_batches_held"] == 4);
    // Each stage holds its own blocks (and the embedding the first, its tied copy the last).
    CHECK(s1["memory_per_rank"][0]["stage"] == 0);
    CHECK(s1["memory_per_rank"][1]["stage"] == 1);
  }
  SECTION("micro-batches re-cut, recomputation, ZeRO-1 and evaluation") {
    // One 4-sequence batch cut into 4 micro-batches; the eval loss, from the last stage, too.
    const std::vector<std::string> eval = {
        "data.eval={format: text, path: " + shared_data("tinyshakespeare.txt") + ", span: [0.5, 0.51]}",
        "train.eval_every=10", "train.eval_steps=2"};
    REQUIRE(train(dir.file("r.yaml"), dir.file("one-eval"), 0, eval).exit_code == 0);
    const Variant v{"pp2-recut",
                    with(eval, {"parallel.pp=2", "parallel.pp_microbatches=4", "train.gradient_checkpointing=full"}),
                    2};
    train_like_one_process(dir, dir.file("r.yaml"), v, loss1, norm1, kReorderedSums);
    CHECK(read_json(dir.file("pp2-recut") + "/summary.json")["pipeline"]["micro_batches"] == 4);
    const auto e1 = read_json(dir.file("one-eval") + "/summary.json")["eval_loss"].get<double>();
    CHECK(read_json(dir.file("pp2-recut") + "/summary.json")["eval_loss"].get<double>() == Approx(e1).margin(1e-4));
    const Variant z{"dp2-pp2-zero1",
                    {"parallel.pp=2", "train.per_device_batch_size=1", "train.grad_accum_steps=2", "parallel.zero=1"},
                    4};
    train_like_one_process(dir, dir.file("r.yaml"), z, loss1, norm1, kReorderedSums);
  }
  SECTION("fp16 with loss scaling, bf16, and ZeRO-2 with untied embeddings") {
    // Against one process with the same 4 micro-batches of 1 sequence, so
    // each micro-batch's low-precision rounding is the same on both sides.
    struct Case {
      const char* name;
      std::vector<std::string> model;     // both sides
      std::vector<std::string> parallel;  // the pipeline side
      int nproc;
      double tolerance;
    };
    const std::vector<Case> cases = {
        {"fp16", {"precision.mode=fp16"}, {}, 2, 1e-4},
        {"bf16", {"precision.mode=bf16"}, {}, 2, 2e-3},  // bf16 rounding flips amplify the last bits' differences
        {"untied-zero2",
         {"model.tie_embeddings=false"},
         {"parallel.zero=2", "parallel.bucket_mb=0.01", "train.grad_accum_steps=2"},
         4,
         1e-4},  // dp 2 x pp 2
    };
    for (const auto& c : cases) {
      INFO(c.name);
      const std::string one = dir.file(std::string("one-") + c.name), pp = dir.file(std::string("pp2-") + c.name);
      const auto base = with({"train.per_device_batch_size=1", "train.grad_accum_steps=4"}, c.model);
      REQUIRE(train(dir.file("r.yaml"), one, 0, base).exit_code == 0);
      auto r = train(dir.file("r.yaml"), pp, c.nproc, with(with(base, {"parallel.pp=2"}), c.parallel));
      INFO(r.output);
      REQUIRE(r.exit_code == 0);
      CHECK(max_abs_diff(column(one, "loss"), column(pp, "loss")) < c.tolerance);
      CHECK(max_abs_diff(column(one, "grad_norm"), column(pp, "grad_norm")) < c.tolerance);
    }
  }
  SECTION("dp 2 x tp 2 x pp 2: 8 processes") {
    const Variant v{"dp2-tp2-pp2",
                    {"parallel.tp=2", "parallel.pp=2", "train.per_device_batch_size=1", "train.grad_accum_steps=2"},
                    8};
    const auto r = train_like_one_process(dir, dir.file("r.yaml"), v, loss1, norm1, kReorderedSums);
    const auto s = read_json(dir.file(v.name) + "/summary.json");
    CHECK(s["grid"]["dp"] == 2);
    CHECK(s["grid"]["tp"] == 2);
    CHECK(s["grid"]["pp"] == 2);
    CHECK(s["memory_per_rank"].size() == 8);
  }
}

TEST_CASE("parallel: a pipeline-parallel checkpoint holds the whole model, exports it, and resumes at any pp",
          "[parallel][cli][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  const std::vector<std::string> sets = {"checkpoint.every=10", "train.per_device_batch_size=2",
                                         "train.grad_accum_steps=2"};
  REQUIRE(train(dir.file("r.yaml"), dir.file("one"), 0, sets).exit_code == 0);
  std::vector<std::string> pp2 = sets;
  pp2.push_back("parallel.pp=2");
  auto r = train(dir.file("r.yaml"), dir.file("pp2"), 2, pp2);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);

  // Each stage's file of its parameters, joined: the same tensors as the 1-process checkpoint's.
  const fs::path ckpt = fs::path(dir.file("pp2")) / "checkpoints/step_00000010";
  CHECK(fs::exists(ckpt / "model.rank0.safetensors"));
  CHECK(fs::exists(ckpt / "model.rank1.safetensors"));
  check_same_model(fs::path(dir.file("one")) / "checkpoints/step_00000010", ckpt, 1e-4);
  // Its export: the 1-process export's tensors, and transformers computes the checkpoint's logits from it.
  auto e = run_gputrain({"export", dir.file("pp2"), "--out", dir.file("hf")});
  INFO(e.output);
  REQUIRE(e.exit_code == 0);
  CHECK_THAT(e.output, Contains("exported step 20"));  // the newest (train.max_steps)
  REQUIRE(run_gputrain({"export", dir.file("one"), "--out", dir.file("hf-one")}).exit_code == 0);
  check_same_tensors(dir.file("hf-one") + "/model.safetensors", dir.file("hf") + "/model.safetensors", 1e-4);
  check_export_logits(dir.file("pp2") + "/checkpoints/step_00000020", dir.file("hf"), "GPT2LMHeadModel");

  // Resumed at step 10: at the same pp exactly; with one process (pp 1), within float32 noise.
  const auto straight = column(dir.file("pp2"), "loss");
  train_resumed(dir.file("r.yaml"), dir.file("same"), 2, with_resume(pp2, ckpt.string()), straight, 10, 0);
  train_resumed(dir.file("r.yaml"), dir.file("single"), 0, with_resume(sets, ckpt.string()), straight, 10, 1e-4);

  // With batch size auto, validate cannot check parallel.pp_microbatches; the run does, before training.
  auto recut = train(
      dir.file("r.yaml"), dir.file("recut"), 2,
      {"parallel.pp=2", "train.per_device_batch_size=auto", "train.global_batch_size=8", "parallel.pp_microbatches=3"});
  CHECK(recut.exit_code == 2);
  CHECK_THAT(recut.output, Contains("parallel.pp_microbatches (3) must divide the 8 sequences of a step"));
  CHECK_FALSE(fs::exists(dir.file("recut") + "/metrics.jsonl"));

  // ZeRO-2 cannot keep the tied embedding's two gradients whole: refused before anything runs.
  auto z2 = train(dir.file("r.yaml"), dir.file("z2"), 0, {"parallel.pp=2", "parallel.zero=2"});
  CHECK(z2.exit_code == 2);
  CHECK_THAT(z2.output, Contains("parallel.zero: 2 cannot be combined with pipeline parallelism"));
}

TEST_CASE(
    "parallel: a Llama model (grouped-query attention, SwiGLU) under tp 2 and pp 2 matches 1 process, and its "
    "tp checkpoint joins",
    "[parallel][cli][slow][llama]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  // 4 query heads sharing 2 key/value heads: each tp rank computes 2 and 1.
  const std::vector<std::string> llama = {"model.arch=llama", "model.n_head=4", "model.n_kv_head=2",
                                          "checkpoint.every=10"};
  REQUIRE(train(dir.file("r.yaml"), dir.file("one"), 0, llama).exit_code == 0);
  const auto loss1 = column(dir.file("one"), "loss");
  const auto norm1 = column(dir.file("one"), "grad_norm");
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), llama.begin(), llama.end());
    return extra;
  };
  const auto tp = train_like_one_process(dir, dir.file("r.yaml"), {"tp2", with({"parallel.tp=2"}), 2}, loss1, norm1,
                                         kReorderedSums);
  // Per block c_attn and c_fc (q/k/v, gate/up) and both projections; no biases under llama.
  CHECK_THAT(tp.output, Contains("tensor parallel: 8 of 15 parameter tensors split over 2 ranks"));
  train_like_one_process(
      dir, dir.file("r.yaml"),
      {"pp2", with({"parallel.pp=2", "train.per_device_batch_size=1", "train.grad_accum_steps=4"}), 2}, loss1, norm1,
      kReorderedSums);
  // The tp 2 checkpoint's shards join into the 1-process model, also through export.
  auto e = run_gputrain({"export", dir.file("tp2"), "--out", dir.file("hf")});
  INFO(e.output);
  REQUIRE(e.exit_code == 0);
  auto e1 = run_gputrain({"export", dir.file("one"), "--out", dir.file("hf1")});
  REQUIRE(e1.exit_code == 0);
  check_same_tensors(dir.file("hf1") + "/model.safetensors", dir.file("hf") + "/model.safetensors", 1e-4);
}
