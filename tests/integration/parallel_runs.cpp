#include "parallel_runs.h"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_dir.h"
#include "same_tensors.h"

namespace fs = std::filesystem;

namespace gputrain::test {

CommandResult train(const std::string& recipe, const std::string& out, int nproc,
                    const std::vector<std::string>& sets) {
  std::vector<std::string> args = {"run", recipe, "--output-dir", out};
  if (nproc > 0) args.insert(args.end(), {"--nproc-per-node", std::to_string(nproc)});
  for (const auto& s : sets) args.insert(args.end(), {"--set", s});
  return run_gputrain(args);
}

// Trains `v` into dir/<name> and checks its per-step losses and gradient
// norms against the 1-process run's, within `tolerance`.
CommandResult train_like_one_process(const TempDir& dir, const std::string& recipe, const Variant& v,
                                     const std::vector<double>& loss1, const std::vector<double>& norm1,
                                     double tolerance) {
  auto r = train(recipe, dir.file(v.name), v.nproc, v.sets);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const double loss = max_abs_diff(loss1, column(dir.file(v.name), "loss")),
               norm = max_abs_diff(norm1, column(dir.file(v.name), "grad_norm"));
  // What the tolerances beside the tests were measured from (ctest -V shows it).
  std::cout << v.name << ": largest per-step difference from one process: loss " << loss << ", grad norm " << norm
            << " (tolerance " << tolerance << ")" << std::endl;
  CHECK(loss < tolerance);
  CHECK(norm < tolerance);
  return r;
}

// Starts the launcher in the background, its output in `log`.
int spawn_launcher(const std::string& recipe, const std::string& out, int nproc, const std::vector<std::string>& sets,
                   const std::string& log, const std::vector<std::string>& flags) {
  std::vector<std::string> args = {"run", recipe, "--output-dir", out, "--nproc-per-node", std::to_string(nproc)};
  args.insert(args.end(), flags.begin(), flags.end());
  for (const auto& s : sets) args.insert(args.end(), {"--set", s});
  const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int pid = spawn_gputrain(args, fd);
  close(fd);
  return pid;
}

// The pid of the launcher's worker with RANK=`rank`, or -1.
int worker_pid(int launcher, int rank) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream status(e.path() / "status");
    std::string line;
    int ppid = -1;
    while (std::getline(status, line))
      if (line.rfind("PPid:", 0) == 0) ppid = std::atoi(line.c_str() + 5);
    if (ppid != launcher) continue;
    std::ifstream env(e.path() / "environ");
    std::string var;
    while (std::getline(env, var, '\0'))
      if (var == "RANK=" + std::to_string(rank)) return std::stoi(name);
  }
  return -1;
}

// A resumed run's `steps` losses are the uninterrupted run's last ones: bitwise
// with tolerance 0, else within it.
void check_continues(const std::vector<double>& straight, const std::vector<double>& resumed, size_t steps,
                     double tolerance) {
  REQUIRE(resumed.size() == steps);
  const size_t start = straight.size() - steps;
  for (size_t i = 0; i < steps; ++i) {
    if (tolerance == 0) CHECK(resumed[i] == straight[start + i]);
    else CHECK(std::abs(resumed[i] - straight[start + i]) < tolerance);
  }
}

CommandResult train_resumed(const std::string& recipe, const std::string& out, int nproc,
                            const std::vector<std::string>& sets, const std::vector<double>& straight, size_t steps,
                            double tolerance) {
  CommandResult r = train(recipe, out, nproc, sets);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  check_continues(straight, column(out, "loss"), steps, tolerance);
  return r;
}

std::vector<std::string> with_resume(std::vector<std::string> sets, const std::string& checkpoint) {
  sets.push_back("checkpoint.resume=" + checkpoint);
  return sets;
}

size_t metric_lines(const std::string& out) {
  std::error_code ec;
  if (!fs::exists(out + "/metrics.jsonl", ec)) return 0;
  return read_jsonl(out + "/metrics.jsonl").size();
}

void check_kill_during_save(const TempDir& dir, const std::vector<std::string>& sets, int victim) {
  write_file(dir.file("r.yaml"), dp_recipe());
  REQUIRE(train(dir.file("r.yaml"), dir.file("straight"), 2, sets).exit_code == 0);

  const std::string out = dir.file("killed");
  const fs::path root = fs::path(out) / "checkpoints";
  const int launcher = spawn_launcher(dir.file("r.yaml"), out, 2, sets, dir.file("log"));
  REQUIRE(wait_until([&] { return !gputrain::list_checkpoints(root).complete.empty(); }));
  auto writing = [&] {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(root, ec))
      if (e.path().filename().string().rfind(".tmp-step_", 0) == 0) return true;
    return false;
  };
  const int pid = worker_pid(launcher, victim);
  REQUIRE(pid > 0);
  REQUIRE(wait_until(writing));
  kill(pid, SIGKILL);
  CHECK(wait_exit_code(launcher) != 0);
  const auto left = gputrain::list_checkpoints(root, gputrain::CheckpointCheck::kChecksums);
  CHECK(left.broken.empty());
  REQUIRE(!left.complete.empty());
  INFO("newest whole checkpoint " << left.complete.back().string());

  auto resumed = train(dir.file("r.yaml"), out, 2, sets);
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  CHECK_THAT(resumed.output, Catch::Contains("resume: continuing from"));
  const fs::path straight = fs::path(dir.file("straight")) / "checkpoints";
  const auto last = gputrain::list_checkpoints(straight).complete.back().filename();
  CHECK(check_same_state_files(straight / last, root / last).size() == 4);  // model and optimizer of each rank
  // The killed run's temporary save was cleared by the resumed one.
  for (const auto& e : fs::directory_iterator(root)) CHECK(e.path().filename().string().rfind("step_", 0) == 0);
}

std::vector<double> peak_rss_mb(const std::vector<int>& pids) {
  std::vector<double> mb;
  for (int pid : pids) mb.push_back(proc_status_mb(std::to_string(pid), "VmHWM"));
  return mb;
}

std::vector<double> training_peak_mb(const TempDir& dir, const std::string& name, int nproc,
                                     const std::vector<std::string>& sets, std::vector<double>* built_mb) {
  ArmedFailpoints failpoints("train.start=pause;train.done=pause");
  const int launcher = spawn_launcher(dir.file("r.yaml"), dir.file(name), nproc, sets, dir.file(name + ".log"));
  KillOnExit guard({launcher});
  INFO(name);
  const std::vector<int> pids = failpoints.wait_paused("train.start", launcher, static_cast<size_t>(nproc));
  REQUIRE(pids.size() == static_cast<size_t>(nproc));
  if (built_mb) *built_mb = peak_rss_mb(pids);
  else
    for (int pid : pids) std::ofstream("/proc/" + std::to_string(pid) + "/clear_refs") << "5";
  failpoints.release("train.start");
  REQUIRE(failpoints.wait_paused("train.done", launcher, static_cast<size_t>(nproc)).size() == pids.size());
  const std::vector<double> mb = peak_rss_mb(pids);
  failpoints.release("train.done");
  INFO(read_file(dir.file(name + ".log")));
  CHECK(wait_exit_code(launcher) == 0);
  return mb;
}

}  // namespace gputrain::test
