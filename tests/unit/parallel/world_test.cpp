// World detection from launcher environment variables, and ZeRO's partition.
#include <catch2/catch.hpp>

#include <map>

#include "parallel/data_parallel.h"
#include "parallel/world.h"
#include "test_util.h"
#include "util/error.h"

using namespace gputrain;

namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
}

std::string world_error(std::map<std::string, std::string> vars) {
  return test::error_message(ErrorKind::kUsage, [&] { detect_world(env_of(std::move(vars))); });
}

}  // namespace

TEST_CASE("world: no launcher variables is a single process", "[parallel]") {
  const World w = detect_world(env_of({}));
  CHECK(w.size == 1);
  CHECK(w.rank == 0);
  CHECK_FALSE(w.distributed());
}

TEST_CASE("world: torchrun variables give rank, size, local rank and master", "[parallel]") {
  const World w = detect_world(env_of({{"RANK", "5"},
                                       {"WORLD_SIZE", "8"},
                                       {"LOCAL_RANK", "1"},
                                       {"LOCAL_WORLD_SIZE", "4"},
                                       {"MASTER_ADDR", "10.1.2.3"},
                                       {"MASTER_PORT", "1234"}}));
  CHECK(w.rank == 5);
  CHECK(w.size == 8);
  CHECK(w.local_rank == 1);
  CHECK(w.local_size == 4);
  CHECK(w.master_addr == "10.1.2.3");
  CHECK(w.master_port == 1234);
  CHECK(w.source == "torchrun variables");
}

TEST_CASE("world: under torchrun's agent store, every rank joins it under its attempt", "[parallel]") {
  std::map<std::string, std::string> vars = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}};
  const World own = detect_world(env_of(vars));  // gputrain's own launcher: rank 0 hosts the store
  CHECK_FALSE(own.agent_store);
  CHECK(own.attempt == 0);
  vars["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  vars["TORCHELASTIC_RESTART_COUNT"] = "3";
  vars["TORCHELASTIC_RUN_ID"] = "job-7";
  const World torchrun = detect_world(env_of(vars));
  CHECK(torchrun.agent_store);
  CHECK(torchrun.attempt == 3);
  CHECK(torchrun.run_id == "job-7");
  CHECK(torchrun.describe().find("(torchrun's store, attempt 3)") != std::string::npos);
  vars["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  CHECK_FALSE(detect_world(env_of(vars)).agent_store);
  vars["TORCHELASTIC_RESTART_COUNT"] = "one";
  CHECK_THAT(world_error(vars), Catch::Contains("TORCHELASTIC_RESTART_COUNT='one' is not a whole number"));
}

TEST_CASE("world: SLURM srun variables, master from the first host of the node list", "[parallel]") {
  const World w = detect_world(env_of({{"SLURM_PROCID", "3"},
                                       {"SLURM_NTASKS", "4"},
                                       {"SLURM_LOCALID", "1"},
                                       {"SLURM_TASKS_PER_NODE", "2(x2)"},
                                       {"SLURM_NODELIST", "gpu[07-08]"}}));
  CHECK(w.rank == 3);
  CHECK(w.size == 4);
  CHECK(w.local_rank == 1);
  CHECK(w.local_size == 2);
  CHECK(w.master_addr == "gpu07");
  CHECK(w.master_port == 29500);
  // torchrun's variables win where both are set (torchrun inside an allocation).
  CHECK(detect_world(env_of({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"RANK", "0"}, {"WORLD_SIZE", "1"}})).size ==
        1);
}

TEST_CASE("world: Open MPI variables", "[parallel]") {
  const World w = detect_world(env_of({{"OMPI_COMM_WORLD_RANK", "1"},
                                       {"OMPI_COMM_WORLD_SIZE", "2"},
                                       {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                       {"MASTER_ADDR", "node1"}}));
  CHECK(w.rank == 1);
  CHECK(w.size == 2);
  CHECK(w.local_rank == 1);
  CHECK(w.master_addr == "node1");
  CHECK_THAT(world_error({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}}),
             Catch::Contains("MASTER_ADDR"));
}

TEST_CASE("world: inconsistent or malformed variables are usage errors naming them", "[parallel]") {
  CHECK_THAT(world_error({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}),
             Catch::Contains("rank 2 is outside a world of 2"));
  CHECK_THAT(world_error({{"RANK", "0"}}), Catch::Contains("WORLD_SIZE is not set"));
  CHECK_THAT(world_error({{"RANK", "0"}, {"WORLD_SIZE", "two"}}), Catch::Contains("WORLD_SIZE='two'"));
  CHECK_THAT(world_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}}),
             Catch::Contains("MASTER_PORT='70000'"));
  CHECK_THAT(world_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}}), Catch::Contains("MASTER_ADDR is not set"));
  CHECK_THAT(
      world_error(
          {{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}),
      Catch::Contains("local rank 2 is outside"));
}

TEST_CASE("world: the first host of a SLURM host list", "[parallel]") {
  CHECK(first_slurm_host("node01") == "node01");
  CHECK(first_slurm_host("node[03-05,9],gpu1") == "node03");
  CHECK(first_slurm_host("a,b") == "a");
  CHECK(first_slurm_host("rack[1-2]-ib") == "rack1-ib");
  CHECK(first_slurm_host("n[010,012]") == "n010");
}

TEST_CASE("zero: parameters split into contiguous runs of about equal size", "[parallel]") {
  const std::vector<int64_t> sizes = {100, 10, 10, 50, 50, 10, 100, 30};  // 360 in all
  for (int parts : {1, 2, 3, 4}) {
    const std::vector<int> owner = partition_contiguous(sizes, parts);
    REQUIRE(owner.size() == sizes.size());
    std::vector<int64_t> share(static_cast<size_t>(parts), 0);
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (i > 0) CHECK((owner[i] == owner[i - 1] || owner[i] == owner[i - 1] + 1));  // contiguous, in order
      share[static_cast<size_t>(owner[i])] += sizes[i];
    }
    CHECK(owner.front() == 0);
    CHECK(owner.back() == parts - 1);
    for (int64_t s : share) CHECK(std::abs(s - 360 / parts) <= 100);  // within one tensor of an even split
  }
}
