// `gputrain run --nproc-per-node N`: starts N workers on this node with the
// torchrun-style variables set (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), prefixes each line they print
// with its rank, forwards SIGINT/SIGTERM/SIGUSR1/SIGUSR2 to them, and when a
// worker fails stops the others and names the failed rank and its exit code.
#pragma once
#include <string>
#include <vector>

namespace gputrain {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;                   // 0: a free port (one node), else 29500
  std::string executable;                // the worker program (this one: /proc/self/exe)
  std::vector<std::string> worker_args;  // its arguments, the same for every worker
  double grace_s = 10;                   // after a failure, how long the other workers get before SIGKILL
  int relay_fd = 1;                      // where the workers' prefixed output goes (stdout; eval: stderr)
};

// Runs the workers to completion; returns the launcher's exit code:
// 0 when all succeed; a failed worker's own exit code (1 when it was killed
// by a signal); after a forwarded stop signal, rank 0's code (143 or 130).
int launch_workers(LaunchOptions o);

// A TCP port nobody listens on now (for a one-node run's rendezvous).
int free_tcp_port();

}  // namespace gputrain
