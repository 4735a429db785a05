// Checkpoints an earlier build wrote still resume (tests/fixtures/checkpoints_before_round3: one
// process, and ZeRO-3 over two ranks, each rank's files apart). A resume from their step 2
// reproduces the steps 3 and 4 that build trained next, with no recipe key reported as diverging.
#include <catch2/catch.hpp>

#include <filesystem>

#include "parallel_runs.h"
#include "test_util.h"

using namespace gputrain;
using namespace gputrain::test;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

// Resumes the fixture `name` from a copy (a resume must not need to write beside the checkpoint).
void check_old_checkpoint_resumes(const std::string& name, int nproc) {
  const fs::path fixture = fs::path(GPUTRAIN_SOURCE_DIR) / "tests/fixtures/checkpoints_before_round3" / name;
  TempDir dir;
  const fs::path copy = dir.file("old");
  fs::copy(fixture, copy, fs::copy_options::recursive);
  const std::string out = dir.file("resumed");
  const CommandResult r = train((copy / "recipe.yaml").string(), out, nproc,
                                {"checkpoint.resume=" + (copy / "step_00000002").string(), "metrics.progress=off"});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("resume: continuing from") && Contains("at step 2"));
  // A key newer than the checkpoint reads as its default, which is what the old run did.
  CHECK_FALSE(r.output.find("but not as the saved one would have") != std::string::npos);
  const std::vector<nlohmann::json> before = read_jsonl((copy / "metrics.jsonl").string());
  const std::vector<nlohmann::json> after = step_records(out);
  REQUIRE(before.size() == 4);
  REQUIRE(after.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    const nlohmann::json &old = before[i + 2], &now = after[i];
    INFO("step " << now["step"]);
    CHECK(now["step"] == old["step"]);
    CHECK(now["tokens"] == old["tokens"]);
    // Bitwise on the machine that wrote them; another CPU's kernels may round the last bits apart.
    CHECK(now["loss"].get<double>() == Approx(old["loss"].get<double>()).margin(1e-4));
    CHECK(now["grad_norm"].get<double>() == Approx(old["grad_norm"].get<double>()).margin(1e-4));
  }
  CHECK(read_json(out + "/summary.json")["resumed_from_step"] == 2);
}

}  // namespace

TEST_CASE("checkpoint compat: one process's checkpoint from an earlier build resumes", "[checkpoint][cli]") {
  check_old_checkpoint_resumes("single", 0);
}

TEST_CASE("checkpoint compat: a ZeRO-3 checkpoint of two ranks from an earlier build resumes",
          "[checkpoint][parallel][cli]") {
  check_old_checkpoint_resumes("zero3", 2);
}
