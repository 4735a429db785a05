// The run's start-up lines and last line (report/), built from values alone.
#include <catch2/catch.hpp>

#include <algorithm>

#include "optim/make_optimizer.h"
#include "report/run_summary.h"
#include "report/start_log.h"
#include "test_util.h"

using namespace gputrain;
using Catch::Matchers::Contains;

TEST_CASE("start log: the lines say what trains, where its optimizer state lives and where a resume continues",
          "[report]") {
  Settings s;
  s.run.name = "r";
  s.model = test::model_settings(32, 16, 2, 2, 16);
  s.train.max_steps = 10;
  StartFacts f;
  f.recipe_source = "r.yaml", f.device = "cpu", f.threads = 2, f.parameters = 12345, f.rank_parameters = 12345;
  f.precision = "fp32", f.optimizer = "adamw", f.optimizer_state_bytes = 8 * 12345;
  f.data = "synthetic", f.samples_per_epoch = 100, f.sequences_per_step = 5, f.output_dir = "out";
  std::vector<std::string> lines = start_log_lines(s, f);
  REQUIRE(lines.size() == 7);
  CHECK(lines[0] == "gputrain: r on cpu (2 threads), recipe r.yaml");
  CHECK_THAT(lines[3], Contains("(8.00 bytes per parameter)"));
  CHECK(lines[5] == "data: 100 windows per epoch; 10 steps read 0.50 epochs");
  f.optimizer_placement = "the state in a file";
  f.resumed = StartFacts::Resumed{"ckpt/step_00000004", 4, 256, 20, 0.5};
  lines = start_log_lines(s, f);
  REQUIRE(lines.size() == 9);
  CHECK(lines[4] == "optimizer: the state in a file");
  CHECK(lines.back() ==
        "resume: continuing from ckpt/step_00000004 at step 4 (256 tokens seen; verified and read "
        "in 0.50 s); data from sample 20");
}

TEST_CASE("run summary: the parts of a run's techniques follow the common keys, and the last line", "[report]") {
  RunTotals t;
  t.step = 3, t.tokens = 300, t.last_loss = 2.5, t.last_eval = 2.75;
  SummaryParts parts;
  parts.world_size = 2;
  parts.mfu = 0.123456;
  parts.bf16_copy_tensors = 2, parts.bf16_copy_bytes = 1 << 20;
  parts.parallel = {{"zero", 1}};
  CHECK(finish_line("ok", t, 3.0, 100) ==
        "ok: 3 steps, 300 tokens in 3s, 100 tokens/s; final loss 2.5000, eval loss "
        "2.7500");
  Settings s;
  const auto optimizer =
      make_optimizer({ParamGroup{"decay", {"w"}, {torch::zeros({4}, torch::requires_grad())}}}, s.optim);
  const nlohmann::ordered_json j = build_summary("ok", t, s, *optimizer, SummaryFacts{}, parts);
  std::vector<std::string> keys;
  for (const auto& [key, value] : j.items()) keys.push_back(key);
  const auto at = [&](const std::string& k) { return std::find(keys.begin(), keys.end(), k) - keys.begin(); };
  CHECK(at("recipe_hash") < at("world_size"));
  CHECK(at("world_size") < at("mfu"));
  CHECK(at("mfu") < at("bf16_weight_copies"));
  CHECK(at("bf16_weight_copies") < at("zero"));
  CHECK(j["mfu"] == 0.1235);
  CHECK(j["bf16_weight_copies"]["mb"] == 1.0);
  CHECK_FALSE(j.contains("lora"));  // a part the run has not
}
