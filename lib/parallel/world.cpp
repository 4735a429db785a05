#include "parallel/world.h"

#include <cstdlib>
#include <fmt/format.h>

#include "util/error.h"

namespace gputrain {
namespace {

constexpr int kDefaultPort = 29500;  // torchrun's default, so mixed tooling agrees

// An integer variable: nullopt when unset, a usage error when not a whole number in [lo, hi].
std::optional<int> int_var(const EnvLookup& env, const std::string& name, int lo, int hi) {
  const auto v = env(name);
  if (!v) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(v->c_str(), &end, 10);
  if (v->empty() || *end != '\0' || errno != 0 || n < lo || n > hi)
    throw usage_error(
        fmt::format("environment: {}='{}' is not a whole number in [{}, {}]\n"
                    "    fix: set it as your launcher documents, or unset it for a single-process run",
                    name, *v, lo, hi));
  return static_cast<int>(n);
}

int required_int(const EnvLookup& env, const std::string& name, const std::string& because, int lo, int hi) {
  if (auto v = int_var(env, name, lo, hi)) return *v;
  throw usage_error("environment: " + because + " but " + name + " is not set\n    fix: set " + name +
                    " (gputrain run --nproc-per-node N sets all of them)");
}

// SLURM_TASKS_PER_NODE / SLURM_STEP_TASKS_PER_NODE: "4(x2),3" -> the first node's count.
std::optional<int> slurm_tasks_on_first_node(const EnvLookup& env) {
  for (const char* name : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
    const auto v = env(name);
    if (!v || v->empty()) continue;
    const int n = std::atoi(v->c_str());
    if (n > 0) return n;
  }
  return std::nullopt;
}

void check_consistent(const World& w, const std::string& vars) {
  if (w.rank >= w.size)
    throw usage_error(
        fmt::format("environment: rank {} is outside a world of {} processes ({})\n"
                    "    fix: ranks run from 0 to the world size - 1",
                    w.rank, w.size, vars));
  if (w.local_rank >= w.local_size)
    throw usage_error(
        fmt::format("environment: local rank {} is outside the {} processes of this node ({})\n"
                    "    fix: local ranks run from 0 to the node's process count - 1",
                    w.local_rank, w.local_size, vars));
  if (w.local_size > w.size)
    throw usage_error(
        fmt::format("environment: {} processes on this node but {} in the world ({})", w.local_size, w.size, vars));
}

}  // namespace

std::string World::describe() const {
  if (!launched()) return "1 process";
  return fmt::format("rank {} of {} (local {} of {}), rendezvous at {}:{}{}, from {}", rank, size, local_rank,
                     local_size, master_addr, master_port,
                     agent_store ? fmt::format(" (torchrun's store, attempt {})", attempt) : "", source);
}

std::string first_slurm_host(const std::string& nodelist) {
  // The first entry ends at a comma outside brackets.
  std::string first;
  int depth = 0;
  for (char c : nodelist) {
    if (c == ',' && depth == 0) break;
    depth += c == '[' ? 1 : c == ']' ? -1 : 0;
    first += c;
  }
  const auto open = first.find('[');
  if (open == std::string::npos) return first;
  // "node[03-05,9]": the prefix and the first number (or range start), zero padding kept.
  std::string range = first.substr(open + 1);
  const auto stop = range.find_first_of(",-]");
  return first.substr(0, open) + range.substr(0, stop) +
         (first.find(']') + 1 < first.size() ? first.substr(first.find(']') + 1) : "");
}

World detect_world(const EnvLookup& env) {
  World w;
  const int kMaxRanks = 1 << 20;
  if (env("RANK") || env("WORLD_SIZE")) {
    const std::string vars = "torchrun variables RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE";
    w.source = "torchrun variables";
    w.size = required_int(env, "WORLD_SIZE", "RANK is set", 1, kMaxRanks);
    w.rank = required_int(env, "RANK", "WORLD_SIZE is set", 0, kMaxRanks);
    w.local_rank = int_var(env, "LOCAL_RANK", 0, kMaxRanks).value_or(w.size == 1 ? 0 : w.rank);
    w.local_size = int_var(env, "LOCAL_WORLD_SIZE", 1, kMaxRanks).value_or(w.size);
    check_consistent(w, vars);
    const auto agent = env("TORCHELASTIC_USE_AGENT_STORE");
    w.agent_store = agent && (*agent == "True" || *agent == "true" || *agent == "1");
    w.attempt = int_var(env, "TORCHELASTIC_RESTART_COUNT", 0, 1 << 30).value_or(0);
    w.run_id = env("TORCHELASTIC_RUN_ID").value_or("");
    if (w.distributed() && !env("MASTER_ADDR"))
      throw usage_error("environment: WORLD_SIZE is " + std::to_string(w.size) +
                        " but MASTER_ADDR is not set\n    fix: set MASTER_ADDR to rank 0's host (and MASTER_PORT)");
  } else if (env("OMPI_COMM_WORLD_SIZE")) {
    w.source = "Open MPI variables";
    w.size = required_int(env, "OMPI_COMM_WORLD_SIZE", "an Open MPI launch", 1, kMaxRanks);
    w.rank = required_int(env, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE is set", 0, kMaxRanks);
    w.local_rank = int_var(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0, kMaxRanks).value_or(0);
    w.local_size = int_var(env, "OMPI_COMM_WORLD_LOCAL_SIZE", 1, kMaxRanks).value_or(1);
    check_consistent(w, "OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE");
    if (w.distributed() && !env("MASTER_ADDR"))
      throw usage_error("environment: an Open MPI launch of " + std::to_string(w.size) +
                        " processes needs MASTER_ADDR (rank 0's host)\n"
                        "    fix: mpirun -x MASTER_ADDR=<host of rank 0> -x MASTER_PORT=29500 ...");
  } else if (env("SLURM_PROCID") && (env("SLURM_STEP_NUM_TASKS") || env("SLURM_NTASKS"))) {
    // Inside srun. (A batch script itself also has SLURM_PROCID=0; SLURM_STEP_NUM_TASKS
    // is the step's own count where srun sets it.)
    w.source = "SLURM variables";
    w.size = env("SLURM_STEP_NUM_TASKS") ? required_int(env, "SLURM_STEP_NUM_TASKS", "", 1, kMaxRanks)
                                         : required_int(env, "SLURM_NTASKS", "", 1, kMaxRanks);
    w.rank = required_int(env, "SLURM_PROCID", "", 0, kMaxRanks);
    w.local_rank = int_var(env, "SLURM_LOCALID", 0, kMaxRanks).value_or(0);
    w.local_size = slurm_tasks_on_first_node(env).value_or(w.local_rank + 1);
    if (w.local_size <= w.local_rank) w.local_size = w.local_rank + 1;
    check_consistent(w, "SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID");
    if (!env("MASTER_ADDR") && w.distributed()) {
      const auto nodes = env("SLURM_STEP_NODELIST") ? env("SLURM_STEP_NODELIST") : env("SLURM_NODELIST");
      if (!nodes || nodes->empty())
        throw usage_error(
            "environment: a SLURM launch of " + std::to_string(w.size) +
            " tasks without SLURM_NODELIST or MASTER_ADDR\n    fix: export MASTER_ADDR in the job script");
      w.master_addr = first_slurm_host(*nodes);
    }
  } else {
    return w;
  }
  if (auto addr = env("MASTER_ADDR")) w.master_addr = *addr;
  w.master_port = int_var(env, "MASTER_PORT", 1, 65535).value_or(kDefaultPort);
  return w;
}

World detect_world_from_environment() {
  return detect_world([](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    return v ? std::optional<std::string>(v) : std::nullopt;
  });
}

}  // namespace gputrain
