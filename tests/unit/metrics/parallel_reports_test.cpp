// summary.json's parallelism reports (docs/metrics.md): keys, rounding, and null when there is nothing to report.
#include <catch2/catch.hpp>

#include "metrics/parallel_reports.h"

using namespace gputrain;
using json = nlohmann::ordered_json;

TEST_CASE("parallel reports: grad_sync counts the buckets started before backward ended", "[metrics][parallel]") {
  CHECK(grad_sync_report(std::nullopt).is_null());
  const auto j = grad_sync_report(GradSyncTimes{3, 0.0105, {0.0021234, 0.0080, 0.0120}});
  CHECK(j["buckets"] == 3);
  CHECK(j["started_during_backward"] == 2);
  CHECK(j["backward_ms"].get<double>() == Approx(10.5));
  CHECK(j["bucket_start_ms"] == json::parse("[2.123, 8.0, 12.0]"));
}

TEST_CASE("parallel reports: pipeline layout and memory per rank", "[metrics][parallel]") {
  CHECK(pipeline_report(std::nullopt).is_null());
  const auto p = pipeline_report(PipelineLayout{"1f1b", 4, 0.2000049, {{0, 3}, {3, 6}}});
  CHECK(p["schedule"] == "1f1b");
  CHECK(p["micro_batches"] == 4);
  CHECK(p["bubble_fraction"].get<double>() == Approx(0.2));
  CHECK(p["stage_blocks"] == json::parse("[[0, 3], [3, 6]]"));

  RankMemory plain{1.23456, 0.5, 2.0};
  RankMemory staged = plain;
  staged.stage = 1, staged.micro_batches_held = 2, staged.activations_mb = 7.00049;
  const auto m = memory_per_rank_report({plain, staged});
  REQUIRE(m.size() == 2);
  CHECK(m[0]["rank"] == 0);
  CHECK(m[0]["weights_mb"].get<double>() == Approx(1.235));
  CHECK_FALSE(m[0].contains("stage"));
  CHECK(m[1]["rank"] == 1);
  CHECK(m[1]["stage"] == 1);
  CHECK(m[1]["micro_batches_held"] == 2);
  CHECK(m[1]["activations_mb"].get<double>() == Approx(7.0));
}
