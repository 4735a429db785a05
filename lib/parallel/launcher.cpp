#include "parallel/launcher.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fmt/format.h>
#include <map>

#include "util/error.h"

namespace gputrain {
namespace {

using Clock = std::chrono::steady_clock;

struct Worker {
  int rank = 0;
  pid_t pid = -1;
  int out_fd = -1;      // the read end of its stdout+stderr pipe
  std::string partial;  // output after the last newline
  bool running = true;
  int status = 0;  // waitpid's
};

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exit code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return fmt::format("killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return "an unknown status";
}

bool failed(int status) {
  if (WIFSIGNALED(status)) return true;
  const int code = WEXITSTATUS(status);
  return code != 0 && code != 128 + SIGTERM && code != 128 + SIGINT;
}

void write_all(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

// Prints whole lines of a worker's output to `to`, each prefixed with its rank.
void pump(Worker& w, bool flush_all, int to) {
  char buf[65536];
  while (true) {
    const ssize_t n = ::read(w.out_fd, buf, sizeof buf);
    if (n > 0) {
      w.partial.append(buf, static_cast<size_t>(n));
      if (!flush_all) break;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) {  // end of output
      ::close(w.out_fd);
      w.out_fd = -1;
      flush_all = true;
    }
    break;
  }
  std::string out;
  size_t start = 0;
  for (size_t nl; (nl = w.partial.find('\n', start)) != std::string::npos; start = nl + 1)
    out += fmt::format("[rank {}] ", w.rank) + w.partial.substr(start, nl + 1 - start);
  w.partial.erase(0, start);
  if (flush_all && !w.partial.empty()) {
    out += fmt::format("[rank {}] {}\n", w.rank, w.partial);
    w.partial.clear();
  }
  write_all(to, out);
}

pid_t spawn(const LaunchOptions& o, int local_rank, int world, int port, const sigset_t& old_mask, int& out_fd) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw runtime_error(std::string("launcher: pipe: ") + std::strerror(errno));
  const int rank = o.node_rank * o.nproc_per_node + local_rank;
  const std::map<std::string, std::string> env = {
      {"RANK", std::to_string(rank)},
      {"WORLD_SIZE", std::to_string(world)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node)},
      {"GROUP_RANK", std::to_string(o.node_rank)},
      {"MASTER_ADDR", o.master_addr},
      {"MASTER_PORT", std::to_string(port)},
  };
  std::vector<std::string> args = {o.executable};
  args.insert(args.end(), o.worker_args.begin(), o.worker_args.end());
  const pid_t pid = ::fork();
  if (pid < 0) throw runtime_error(std::string("launcher: fork: ") + std::strerror(errno));
  if (pid == 0) {
    // Own process group: a terminal's Ctrl-C reaches only the launcher, which
    // forwards it once (a worker given two signals would stop without saving).
    ::setpgid(0, 0);
    // A launcher that dies (even by SIGKILL) takes its workers down, gracefully: they save and stop.
    // Their output pipe then has no reader: without this, the first line they print would kill them.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    ::signal(SIGPIPE, SIG_IGN);
    ::dup2(fds[1], STDOUT_FILENO);
    ::dup2(fds[1], STDERR_FILENO);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(o.executable.c_str(), argv.data());
    std::fprintf(stderr, "launcher: cannot run %s: %s\n", o.executable.c_str(), std::strerror(errno));
    ::_exit(127);
  }
  ::close(fds[1]);
  out_fd = fds[0];
  return pid;
}

}  // namespace

int free_tcp_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 29500;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  int port = 29500;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

int launch_workers(LaunchOptions o) {
  if (o.nproc_per_node < 1 || o.nnodes < 1 || o.node_rank < 0 || o.node_rank >= o.nnodes)
    throw usage_error(
        fmt::format("launcher: --node-rank {} must be in [0, --nnodes {}) and --nproc-per-node ({}) "
                    "at least 1",
                    o.node_rank, o.nnodes, o.nproc_per_node));
  const int port = o.master_port > 0 ? o.master_port : (o.nnodes == 1 ? free_tcp_port() : 29500);
  const int world = o.nnodes * o.nproc_per_node;

  // Signals arrive through a signalfd, read in the same loop as the workers' output.
  sigset_t mask, old_mask;
  sigemptyset(&mask);
  for (int s : {SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGCHLD}) sigaddset(&mask, s);
  ::sigprocmask(SIG_BLOCK, &mask, &old_mask);
  const int sig_fd = ::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sig_fd < 0) throw runtime_error(std::string("launcher: signalfd: ") + std::strerror(errno));

  std::vector<Worker> workers(static_cast<size_t>(o.nproc_per_node));
  std::fprintf(stderr, "gputrain launcher: %d worker(s) on node %d of %d, world of %d, rendezvous %s:%d\n",
               o.nproc_per_node, o.node_rank, o.nnodes, world, o.master_addr.c_str(), port);
  for (int i = 0; i < o.nproc_per_node; ++i) {
    Worker& w = workers[static_cast<size_t>(i)];
    w.rank = o.node_rank * o.nproc_per_node + i;
    w.pid = spawn(o, i, world, port, old_mask, w.out_fd);
  }

  int first_failed = -1;  // index into workers
  int forwarded = 0;      // the last stop signal passed on
  // When the stragglers get SIGKILL; never until a worker fails (a sentinel, not std::optional:
  // GCC 12 warns falsely about an optional time_point).
  constexpr Clock::time_point kNever = Clock::time_point::max();
  Clock::time_point kill_at = kNever;
  auto signal_all = [&](int sig) {
    for (auto& w : workers)
      if (w.running) ::kill(w.pid, sig);
  };
  auto reap = [&] {
    for (auto& w : workers) {
      if (!w.running) continue;
      int status = 0;
      if (::waitpid(w.pid, &status, WNOHANG) != w.pid) continue;
      w.running = false;
      w.status = status;
      if (failed(status) && first_failed < 0 && forwarded == 0) {
        first_failed = static_cast<int>(&w - workers.data());
        std::fprintf(stderr, "gputrain launcher: rank %d failed (%s); stopping the other workers\n", w.rank,
                     describe_status(status).c_str());
        signal_all(SIGTERM);
        kill_at = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(o.grace_s * 1000));
      }
    }
  };

  while (true) {
    bool any_running = false, any_output = false;
    for (auto& w : workers) any_running |= w.running, any_output |= w.out_fd >= 0;
    if (!any_running && !any_output) break;
    std::vector<pollfd> fds = {{sig_fd, POLLIN, 0}};
    std::vector<Worker*> owners = {nullptr};
    for (auto& w : workers)
      if (w.out_fd >= 0) fds.push_back({w.out_fd, POLLIN, 0}), owners.push_back(&w);
    int timeout_ms = 500;
    if (kill_at != kNever) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(kill_at - Clock::now()).count();
      if (left <= 0) {
        for (auto& w : workers)
          if (w.running) {
            std::fprintf(stderr, "gputrain launcher: rank %d did not stop within %.0f s; killing it\n", w.rank,
                         o.grace_s);
            ::kill(w.pid, SIGKILL);
          }
        kill_at = kNever;
      } else {
        timeout_ms = static_cast<int>(std::min<int64_t>(left, 500));
      }
    }
    if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR)
      throw runtime_error(std::string("launcher: poll: ") + std::strerror(errno));
    for (size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) pump(*owners[i], false, o.relay_fd);
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo info;
      while (::read(sig_fd, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
        const int sig = static_cast<int>(info.ssi_signo);
        if (sig == SIGCHLD) continue;  // reaped below
        forwarded = sig;
        std::fprintf(stderr, "gputrain launcher: %s: passing it to the workers\n", strsignal(sig));
        signal_all(sig);
      }
    }
    reap();
  }
  ::close(sig_fd);
  ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);

  if (first_failed >= 0) {
    const Worker& w = workers[static_cast<size_t>(first_failed)];
    std::fprintf(stderr, "gputrain launcher: failed: rank %d ended with %s (its output above is prefixed [rank %d])\n",
                 w.rank, describe_status(w.status).c_str(), w.rank);
    return WIFEXITED(w.status) ? WEXITSTATUS(w.status) : 1;
  }
  // No failure: every worker ended with 0, 130 or 143. Rank 0's code says which.
  int code = 0;
  for (const auto& w : workers) {
    const int c = WIFEXITED(w.status) ? WEXITSTATUS(w.status) : 1;
    if (code == 0) code = c;
  }
  return code;
}

}  // namespace gputrain
