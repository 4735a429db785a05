#include "train/run_directories.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "checkpoint/checkpoint_dir.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace gputrain {

namespace fs = std::filesystem;

std::vector<DirectoryLock> lock_run_directories(const Settings& s) {
  const fs::path out = s.resolved_output_dir(), ckpt = s.resolved_checkpoint_dir();
  for (const auto& [dir, what] : {std::pair{out, "output"}, std::pair{ckpt, "checkpoint"}}) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw runtime_error(fmt::format("cannot create {} directory '{}': {}", what, dir.string(), ec.message()));
  }
  std::vector<DirectoryLock> locks;
  locks.push_back(DirectoryLock::acquire(out, "use another --output-dir"));
  std::error_code ec;
  if (!fs::equivalent(out, ckpt, ec)) locks.push_back(DirectoryLock::acquire(ckpt, "set another checkpoint.dir"));
  if (locks.back().held()) clear_abandoned_saves(ckpt, /*other_hosts=*/true);
  return locks;
}

namespace {

// Whether `path` is `dir` or lies below it (both resolved; false when either cannot be).
bool is_within(const fs::path& path, const fs::path& dir) {
  std::error_code ec1, ec2;
  const fs::path p = fs::weakly_canonical(path, ec1), d = fs::weakly_canonical(dir, ec2);
  if (ec1 || ec2) return false;
  const fs::path relative = p.lexically_relative(d);
  return !relative.empty() && *relative.begin() != "..";
}

}  // namespace

SavedRun saved_run(const fs::path& checkpoint, const fs::path& saved_output_dir, const Settings& s) {
  const fs::path out = s.resolved_output_dir();
  return {checkpoint, saved_output_dir, is_within(checkpoint, out) || same_directory(saved_output_dir, out)};
}

// (Rank 0 created the directory when it locked it: lock_run_directories.)
fs::path prepare_output_dir(const Settings& s, bool overwrite, const SavedRun* resumed) {
  fs::path dir = s.resolved_output_dir();
  if ((resumed && resumed->continued) || overwrite) return dir;
  if (!fs::exists(dir / "metrics.jsonl") && !fs::exists(dir / "summary.json")) return dir;
  if (resumed)
    throw usage_error(fmt::format(
        "output directory '{}' already holds a run (metrics.jsonl), and the checkpoint '{}' belongs to another: the "
        "run in '{}'\n    fix: continue that run with --output-dir {}, or start from its checkpoint in a new "
        "--output-dir",
        dir.string(), resumed->checkpoint.string(), resumed->output_dir.string(), resumed->output_dir.string()));
  throw usage_error("output directory '" + dir.string() + "' already holds a run (metrics.jsonl) and no checkpoint " +
                    "to continue from (checkpoint.resume: " + s.checkpoint.resume + ")" +
                    "\n    fix: choose another with --output-dir, or pass --overwrite to replace it");
}

void remove_old_checkpoints(const Settings& s) {
  const CheckpointListing l = list_checkpoints(s.resolved_checkpoint_dir());
  std::error_code ec;
  for (const auto& dir : l.complete) fs::remove_all(dir, ec);
  for (const auto& [dir, _] : l.broken) fs::remove_all(dir, ec);
  if (!l.complete.empty() || !l.broken.empty())
    spdlog::warn("--overwrite: removed {} checkpoint(s) of the earlier run in {}", l.complete.size() + l.broken.size(),
                 s.resolved_checkpoint_dir());
}

namespace {

constexpr const char* kTorchrunAttemptFile = ".gputrain.torchrun";

// "host agent-pid run-id": the same for every attempt one torchrun agent starts.
std::string torchrun_agent(const World& world) {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return fmt::format("{} {} {}\n", host, ::getppid(), world.run_id);
}

}  // namespace

void mark_torchrun_attempt(const fs::path& out, const World& world) {
  write_file_atomic((out / kTorchrunAttemptFile).string(), torchrun_agent(world));
}

bool replaces_failed_torchrun_attempt(const fs::path& out, const World& world) {
  if (!world.agent_store || world.attempt == 0) return false;
  std::ifstream in(out / kTorchrunAttemptFile);
  std::stringstream was;
  was << in.rdbuf();
  return in && was.str() == torchrun_agent(world);
}

bool same_directory(const fs::path& a, const fs::path& b) {
  std::error_code ec1, ec2;
  return fs::weakly_canonical(a, ec1) == fs::weakly_canonical(b, ec2) && !ec1 && !ec2;
}

}  // namespace gputrain
