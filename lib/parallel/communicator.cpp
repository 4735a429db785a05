#include "parallel/communicator.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <thread>

#include "parallel/nccl_backend.h"
#include "util/error.h"

namespace gputrain {
namespace {

using Work = c10::intrusive_ptr<c10d::Work>;
using std::chrono::milliseconds;

std::string first_line(const std::string& s) {
  const auto nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string heartbeat_key(int rank) { return "gputrain/heartbeat/" + std::to_string(rank); }

// The Gloo transport device: loopback when every rank is on this machine;
// otherwise the interface GLOO_SOCKET_IFNAME names, or this host's address.
std::shared_ptr<::gloo::transport::Device> gloo_device(const World& w) {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname)
    return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  if (w.local_size == w.size) return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

}  // namespace

struct Communicator::Shared {
  c10::intrusive_ptr<c10d::Store> store;
  // Heartbeats go through their own connection so they never queue behind the backend's use of the store.
  c10::intrusive_ptr<c10d::Store> heartbeat_store;
  std::thread heartbeat;
  std::atomic<bool> stop{false};
  ~Shared() {
    stop = true;
    if (heartbeat.joinable()) heartbeat.join();
  }
};

struct Communicator::Impl {
  c10::intrusive_ptr<c10d::Backend> backend;
  std::string backend_name;
};

Communicator::Communicator(const World& world, CommBackend backend, torch::Device device, double timeout_s)
    : shared_(std::make_shared<Shared>()),
      impl_(std::make_unique<Impl>()),
      world_(world),
      rank_(world.rank),
      backend_(backend),
      device_(device),
      timeout_s_(timeout_s) {
  for (int r = 0; r < world.size; ++r) ranks_.push_back(r);
  const auto timeout = milliseconds(static_cast<int64_t>(timeout_s * 1000));
  const std::string where = world.master_addr + ":" + std::to_string(world.master_port);
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<std::uint16_t>(world.master_port);
  // Under torchrun its agent already listens there: join it (the backends' rendezvous waits for all).
  opts.isServer = world.rank == 0 && !world.agent_store;
  opts.numWorkers = static_cast<std::size_t>(world.size);
  opts.waitWorkers = !world.agent_store;
  opts.timeout = timeout;
  // The store's keys of this attempt, apart from those a failed one left in torchrun's store.
  auto attempt_keys = [&](c10::intrusive_ptr<c10d::TCPStore> store) -> c10::intrusive_ptr<c10d::Store> {
    if (!world.agent_store) return store;
    return c10::make_intrusive<c10d::PrefixStore>("/worker/attempt_" + std::to_string(world.attempt), store);
  };
  try {
    shared_->store = attempt_keys(c10::make_intrusive<c10d::TCPStore>(world.master_addr, opts));
  } catch (const std::exception& e) {
    const std::string cause = lower(e.what());
    if (world.rank == 0 &&
        (cause.find("address already in use") != std::string::npos || cause.find("eaddrinuse") != std::string::npos))
      throw usage_error("rendezvous: rank 0 cannot listen on " + where + ": the port is in use (another run?)" +
                        "\n    fix: pick a free port with --master-port or MASTER_PORT");
    if (world.rank == 0)
      throw runtime_error(
          fmt::format("rendezvous: rank 0 at {} waited {:.0f} s (parallel.timeout_s) for the other {} "
                      "process(es) to join: {}\n    fix: start every rank (same MASTER_ADDR and "
                      "MASTER_PORT), or under SLURM start gputrain with srun",
                      where, timeout_s, world.size - 1, first_line(e.what())));
    throw runtime_error(
        fmt::format("rendezvous: rank {} could not reach rank 0's store at {} within {:.0f} s "
                    "(parallel.timeout_s): {}\n    fix: check MASTER_ADDR/MASTER_PORT and that rank 0 "
                    "is running and reachable from this host",
                    world.rank, where, timeout_s, first_line(e.what())));
  }
  connect();

  c10d::TCPStoreOptions hb = opts;
  hb.isServer = false;
  hb.numWorkers = std::nullopt;
  hb.waitWorkers = false;
  // Connecting may wait as long as the rendezvous did (a loaded machine can starve the store's accept
  // thread for seconds); each heartbeat after that gives up within 5 s, so a dead rank 0 ends it soon.
  auto heartbeat_store = c10::make_intrusive<c10d::TCPStore>(world.master_addr, hb);
  heartbeat_store->setTimeout(milliseconds(5000));  // on the connection itself: a prefix would not pass it on
  shared_->heartbeat_store = attempt_keys(heartbeat_store);
  shared_->heartbeat = std::thread([sh = shared_.get(), key = heartbeat_key(world.rank)] {
    while (!sh->stop.load()) {
      try {
        sh->heartbeat_store->add(key, 1);
      } catch (...) {
        return;  // the store (rank 0) is gone; the next collective will say so
      }
      for (int i = 0; i < 10 && !sh->stop.load(); ++i) std::this_thread::sleep_for(milliseconds(100));
    }
  });
}

Communicator::Communicator(std::shared_ptr<Shared> shared, const World& world, std::vector<int> ranks, std::string name,
                           CommBackend backend, torch::Device device, double timeout_s)
    : shared_(std::move(shared)),
      impl_(std::make_unique<Impl>()),
      world_(world),
      ranks_(std::move(ranks)),
      name_(std::move(name)),
      backend_(backend),
      device_(device),
      timeout_s_(timeout_s) {
  const auto me = std::find(ranks_.begin(), ranks_.end(), world.rank);
  if (me == ranks_.end())
    throw std::logic_error("Communicator::subgroup: rank " + std::to_string(world.rank) + " is not in group " + name_);
  rank_ = static_cast<int>(me - ranks_.begin());
  connect();
}

std::unique_ptr<Communicator> Communicator::subgroup(const std::vector<int>& world_ranks,
                                                     const std::string& name) const {
  return std::unique_ptr<Communicator>(
      new Communicator(shared_, world_, world_ranks, name, backend_, device_, timeout_s_));
}

void Communicator::connect() {
  const auto timeout = milliseconds(static_cast<int64_t>(timeout_s_ * 1000));
  // A group's backend finds its peers under its own prefix of the shared store.
  c10::intrusive_ptr<c10d::Store> store = shared_->store;
  if (!name_.empty()) store = c10::make_intrusive<c10d::PrefixStore>("gputrain/group/" + name_, store);
  const bool nccl = backend_ == CommBackend::kNccl || (backend_ == CommBackend::kAuto && device_.is_cuda());
  try {
    if (nccl) {
#ifdef GPUTRAIN_WITH_CUDA
      impl_->backend = make_nccl_backend(store, rank_, size(), timeout);
      impl_->backend_name = "nccl";
#else
      throw usage_error("parallel.backend: nccl needs the CUDA build of gputrain\n    fix: use gloo");
#endif
    } else {
      auto options = c10d::ProcessGroupGloo::Options::create(timeout);
      options->devices.push_back(gloo_device(world_));
      options->threads = 2;
      impl_->backend = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank_, size(), options);
      impl_->backend_name = "gloo";
      // Gloo's full mesh is connected on one side of a pair before the other: a rank that went on and
      // closed the group (done, or failed) would break its peer's connecting. None leaves until all have.
      impl_->backend->barrier()->wait();
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw runtime_error(
        fmt::format("rendezvous: rank {} could not connect the {} backend{} to its peers within {:.0f} s: "
                    "{}\n    fix: check that every host can reach the others (GLOO_SOCKET_IFNAME / "
                    "NCCL_SOCKET_IFNAME pick the network interface)",
                    world_.rank, nccl ? "NCCL" : "Gloo", name_.empty() ? "" : " of group " + name_, timeout_s_,
                    first_line(e.what())));
  }
}

Communicator::~Communicator() = default;

std::string Communicator::backend_name() const { return impl_->backend_name; }

torch::Device Communicator::tensor_device() const {
  return impl_->backend_name == "nccl" ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
}

[[noreturn]] void Communicator::fail(const std::string& what, const std::string& cause) const {
  // Whose heartbeat stopped? Two readings 2.5 s apart (a live rank beats every second).
  std::string peers;
  try {
    auto read = [&] {
      std::vector<int64_t> v(static_cast<size_t>(world_.size));
      for (int r = 0; r < world_.size; ++r)
        v[static_cast<size_t>(r)] = shared_->heartbeat_store->add(heartbeat_key(r), 0);
      return v;
    };
    const auto before = read();
    std::this_thread::sleep_for(milliseconds(2500));
    const auto after = read();
    std::vector<std::string> silent;
    for (int r = 0; r < world_.size; ++r)
      if (r != world_.rank && after[static_cast<size_t>(r)] == before[static_cast<size_t>(r)])
        silent.push_back(std::to_string(r));
    if (silent.empty()) peers = "every peer is still alive (one may be stuck, or the network between ranks failed)";
    else
      peers = (silent.size() == 1 ? "peer rank " : "peer ranks ") + fmt::format("{}", fmt::join(silent, ", ")) +
              " stopped responding (exited, killed or hung)";
  } catch (const std::exception&) {
    peers = "peer rank 0 stopped responding (the rendezvous store it hosts is gone)";
  }
  throw runtime_error(
      fmt::format("rank {}: {} ({}{}) failed: {}: {}\n    fix: look at that rank's own output; a "
                  "collective waits at most parallel.timeout_s ({:.0f} s)",
                  world_.rank, what, impl_->backend_name, name_.empty() ? "" : ", group " + name_, peers,
                  first_line(cause), timeout_s_));
}

void PendingCollective::wait() {
  if (!work_) return;
  auto work = *static_cast<Work*>(work_.get());
  work_.reset();
  try {
    work->wait();
  } catch (const std::exception& e) {
    comm_->fail(what_, e.what());
  }
}

namespace {
PendingCollective pending(Work w, const Communicator* c, const std::string& what) {
  return PendingCollective(std::make_shared<Work>(std::move(w)), c, what);
}
}  // namespace

#define GPUTRAIN_LAUNCH(what, call)   \
  try {                               \
    return pending(call, this, what); \
  } catch (const std::exception& e) { \
    fail(what, e.what());             \
  }

PendingCollective Communicator::all_reduce_sum(torch::Tensor& t, const std::string& what) {
  std::vector<at::Tensor> v{t};
  GPUTRAIN_LAUNCH(what, impl_->backend->allreduce(v, c10d::AllreduceOptions{}));
}

void Communicator::run_now(torch::Tensor& t, const std::function<PendingCollective(torch::Tensor&)>& collective) {
  if (t.device().type() == tensor_device().type()) return collective(t).wait();
  torch::Tensor staged = t.to(tensor_device());
  collective(staged).wait();
  t.copy_(staged);
}

void Communicator::all_reduce_sum_now(torch::Tensor& t, const std::string& what) {
  run_now(t, [&](torch::Tensor& x) { return all_reduce_sum(x, what); });
}

void Communicator::broadcast_now(torch::Tensor& t, int root, const std::string& what) {
  run_now(t, [&](torch::Tensor& x) { return broadcast(x, root, what); });
}

PendingCollective Communicator::reduce_sum(torch::Tensor& t, int root, const std::string& what) {
  std::vector<at::Tensor> v{t};
  c10d::ReduceOptions o;
  o.rootRank = root;
  GPUTRAIN_LAUNCH(what, impl_->backend->reduce(v, o));
}

PendingCollective Communicator::broadcast(torch::Tensor& t, int root, const std::string& what) {
  std::vector<at::Tensor> v{t};
  c10d::BroadcastOptions o;
  o.rootRank = root;
  GPUTRAIN_LAUNCH(what, impl_->backend->broadcast(v, o));
}

PendingCollective Communicator::all_gather(torch::Tensor& out, torch::Tensor& in, const std::string& what) {
  GPUTRAIN_LAUNCH(what, impl_->backend->_allgather_base(out, in, c10d::AllgatherOptions{}));
}

PendingCollective Communicator::reduce_scatter_sum(torch::Tensor& out, torch::Tensor& in, const std::string& what) {
  GPUTRAIN_LAUNCH(what, impl_->backend->_reduce_scatter_base(out, in, c10d::ReduceScatterOptions{}));
}

PendingCollective Communicator::send(torch::Tensor& t, int dst, int tag, const std::string& what) {
  std::vector<at::Tensor> v{t};
  GPUTRAIN_LAUNCH(what, impl_->backend->send(v, dst, tag));
}

PendingCollective Communicator::recv(torch::Tensor& t, int src, int tag, const std::string& what) {
  std::vector<at::Tensor> v{t};
  GPUTRAIN_LAUNCH(what, impl_->backend->recv(v, src, tag));
}

PendingCollective Communicator::all_to_all(torch::Tensor& out, torch::Tensor& in,
                                           const std::vector<int64_t>& out_splits,
                                           const std::vector<int64_t>& in_splits, const std::string& what) {
  std::vector<int64_t> o = out_splits, i = in_splits;  // c10d takes them by non-const reference
  GPUTRAIN_LAUNCH(what, impl_->backend->alltoall_base(out, in, o, i, c10d::AllToAllOptions{}));
}

}  // namespace gputrain
