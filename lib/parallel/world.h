// Who this process is in a multi-process run, read from the environment
// conventions launchers already set: torchrun's (and gputrain's own launcher's)
// RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE/MASTER_ADDR/MASTER_PORT, SLURM's
// srun (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, the first host of
// SLURM_NODELIST), and Open MPI's mpirun (OMPI_COMM_WORLD_*). With none of
// them, the run is a single process.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace gputrain {

struct World {
  int rank = 0;
  int size = 1;
  int local_rank = 0;  // picks the GPU: cuda:<local_rank>
  int local_size = 1;
  std::string master_addr = "127.0.0.1";  // where rank 0's rendezvous store listens
  int master_port = 29500;
  std::string source = "single process";  // which convention it came from, for the log
  // torchrun's agent hosts the rendezvous store (TORCHELASTIC_USE_AGENT_STORE) and keeps it across the
  // group's restarts: every rank joins it as a client, under a prefix of this attempt's own
  // (TORCHELASTIC_RESTART_COUNT), as torch.distributed does, so no key of a failed attempt is read.
  bool agent_store = false;
  int attempt = 0;
  std::string run_id;  // TORCHELASTIC_RUN_ID: the same for every attempt of one torchrun job

  bool distributed() const { return size > 1; }
  // Started by a launcher (even as a world of one): the run then takes the
  // multi-process code path, which a one-GPU machine can test with NCCL.
  bool launched() const { return source != "single process"; }
  std::string describe() const;  // "rank 1 of 4 (local 1 of 2), master 10.0.0.1:29500, from torchrun variables"
};

// Looks a variable up; nullopt when unset. Tests pass a map instead of the process environment.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

// Throws a usage error naming the variables when they are malformed or inconsistent
// (rank outside the world, a port that is not a port, a multi-process world without a master).
World detect_world(const EnvLookup& env);
World detect_world_from_environment();

// The first host of a SLURM hostlist: "node[03-05,9],gpu1" -> "node03".
std::string first_slurm_host(const std::string& nodelist);

}  // namespace gputrain
