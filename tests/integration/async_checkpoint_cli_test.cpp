// checkpoint.async (checkpoint/background_saver.h): the checkpoints written on a background thread
// are the synchronous ones, byte for byte, for one process and for a ZeRO-3 run whose ranks each
// write their own files (fully_sharded_cli_test.cpp kills a rank during one).
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_dir.h"
#include "parallel_runs.h"
#include "same_tensors.h"
#include "test_util.h"

using namespace gputrain::test;
using Catch::Contains;
namespace fs = std::filesystem;

TEST_CASE("checkpoint: asynchronous saves are the synchronous ones, for 1 process and for a 2-process ZeRO-3 run",
          "[checkpoint][parallel][cli][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  const std::vector<Variant> runs = {
      {"one", {"checkpoint.every=5"}, 0},
      {"zero3", {"checkpoint.every=5", "train.per_device_batch_size=2", "parallel.zero=3"}}};
  for (const auto& v : runs) {
    SECTION(v.name) {
      const std::string sync = dir.file(std::string(v.name) + "-sync"),
                        async = dir.file(std::string(v.name) + "-async");
      REQUIRE(train(dir.file("r.yaml"), sync, v.nproc, v.sets).exit_code == 0);
      std::vector<std::string> sets = v.sets;
      sets.push_back("checkpoint.async=true");
      // The save of step 10 is held until step 12 has trained (a failpoint): it must write the weights and
      // optimizer state of step 10 (its host copy), not the live tensors training has changed since.
      const auto r = [&] {
        ArmedFailpoints failpoints("checkpoint.write@2=after:train.step_done@12");
        return train(dir.file("r.yaml"), async, v.nproc, sets);
      }();
      INFO(r.output);
      REQUIRE(r.exit_code == 0);
      CHECK_THAT(r.output, Contains("checkpoint: step 20 saved to") && Contains("(in the background)"));
      CHECK(column(async, "loss") == column(sync, "loss"));
      // The three kept (keep_last 3), each the same bytes as the synchronous run's.
      const auto a = gputrain::list_checkpoints(fs::path(sync) / "checkpoints").complete;
      const auto b = gputrain::list_checkpoints(fs::path(async) / "checkpoints").complete;
      REQUIRE(a.size() == 3);
      REQUIRE(b.size() == 3);
      for (size_t i = 0; i < a.size(); ++i) {
        CHECK(a[i].filename() == b[i].filename());
        check_same_state_files(a[i], b[i]);
      }
      // Resumed from the asynchronous step 10, the run ends as the uninterrupted one.
      const auto resumed = train(dir.file("r.yaml"), dir.file(std::string(v.name) + "-resumed"), v.nproc,
                                 with_resume(sets, (b[0].parent_path() / "step_00000010").string()));
      INFO(resumed.output);
      REQUIRE(resumed.exit_code == 0);
      check_continues(column(sync, "loss"), column(dir.file(std::string(v.name) + "-resumed"), "loss"), 10, 0);
    }
  }
}
