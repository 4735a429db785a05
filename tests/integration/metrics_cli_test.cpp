// What a run leaves for watching it, through the gputrain binary: TensorBoard event files read back
// with the tensorboard package (PyPI) and compared with metrics.jsonl, across a resume.
#include <catch2/catch.hpp>

#include <filesystem>

#include "test_util.h"

using namespace gputrain::test;
using Catch::Matchers::Contains;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// A tiny GPT on real text with an eval split; the schedule's length is fixed, so that changing
// max_steps does not change it.
std::string tiny_recipe() {
  const std::string text = shared_data("tinyshakespeare.txt");
  return "run: {name: tb, threads: 2}\n"
         "model: {vocab_size: 256, seq_len: 16, n_layer: 1, n_head: 2, d_model: 16}\n"
         "data:\n"
         "  train: {format: text, path: " +
         text + ", span: [0.0, 0.001]}\n  eval: {format: text, path: " + text +
         ", span: [0.9, 0.901]}\n"
         "train: {per_device_batch_size: 4, max_steps: 12, log_every: 2, eval_every: 6, eval_steps: 2}\n"
         "optim: {lr: 3e-3, schedule: {warmup_steps: 2, decay_steps: 12}}\n"
         "checkpoint: {every: 4}\n"
         "metrics: {progress: off}\n";
}

json read_tensorboard(const std::string& folder, const std::string& out) {
  const CommandResult r =
      run_python({std::string(GPUTRAIN_SOURCE_DIR) + "/tests/reference/tensorboard_events.py", folder, out});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return read_json(out);
}

// The text TensorBoard shows (a markdown code block: four spaces before each line) as written.
std::string unindented(const std::string& block) {
  std::string out;
  size_t at = 0;
  while (at < block.size()) {
    const size_t end = std::min(block.find('\n', at), block.size());
    out += block.substr(at + std::min<size_t>(4, end - at), end - std::min(at + 4, end)) +
           (end < block.size() ? "\n" : "");
    at = end + 1;
  }
  return out;
}

// Every number of every metrics.jsonl line is the scalar at its step under its tag, and no tag
// holds a step twice or a step metrics.jsonl lacks.
void check_scalars_match_metrics(const json& tb, const std::vector<json>& lines) {
  std::map<std::string, std::map<int64_t, double>> expected;
  for (const json& line : lines)
    for (auto it = line.begin(); it != line.end(); ++it)
      if (it.key() != "step" && it.value().is_number()) {
        const std::string tag = it.key().rfind("eval_", 0) == 0 ? "eval/" + it.key().substr(5) : "train/" + it.key();
        expected[tag][line["step"].get<int64_t>()] = it.value().get<double>();
      }
  REQUIRE(expected.count("train/loss"));
  REQUIRE(expected.count("eval/loss"));
  CHECK(tb["scalars"].size() == expected.size());
  for (const auto& [tag, values] : expected) {
    INFO(tag);
    REQUIRE(tb["scalars"].contains(tag));
    const json& points = tb["scalars"][tag];
    CHECK(points.size() == values.size());
    for (const json& p : points) {
      const int64_t step = p[0].get<int64_t>();
      INFO("step " << step);
      REQUIRE(values.count(step));
      CHECK(p[1].get<double>() == Approx(values.at(step)).epsilon(1e-6));  // float32 in the file
    }
  }
}

}  // namespace

TEST_CASE("metrics: TensorBoard files hold every number of metrics.jsonl, and a resumed run continues them",
          "[metrics][cli]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), tiny_recipe());
  const std::string out = dir.file("run");
  // Stopped at step 10 with its last checkpoint at 8: the resumed run cuts steps 9-10 back.
  auto first = run_recipe(dir.file("r.yaml"), out, {"train.max_steps=10", "checkpoint.at_end=false"});
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  auto second = run_recipe(dir.file("r.yaml"), out);
  INFO(second.output);
  REQUIRE(second.exit_code == 0);
  REQUIRE_THAT(second.output, Contains("at step 8"));

  const json tb = read_tensorboard(out + "/tensorboard", dir.file("tb.json"));
  CHECK(tb["files"] == 1);
  const std::vector<json> lines = read_jsonl(out + "/metrics.jsonl");
  REQUIRE(lines.size() == 6);  // steps 2, 4, ..., 12, once each
  check_scalars_match_metrics(tb, lines);
  CHECK(tb["accumulator"]["scalars"].size() == tb["scalars"].size());

  // The recipe at each start (step 0 and the resume's step 8), the summary of the run's end.
  REQUIRE(tb["texts"]["recipe"].size() == 2);
  CHECK(tb["texts"]["recipe"][0][0] == 0);
  CHECK(tb["texts"]["recipe"][1][0] == 8);
  CHECK_THAT(unindented(tb["texts"]["recipe"][1][1]), Contains("max_steps: 12") && Contains("name: tb"));
  REQUIRE(tb["texts"]["summary"].size() == 1);
  CHECK(tb["texts"]["summary"][0][0] == 12);
  CHECK(json::parse(unindented(tb["texts"]["summary"][0][1])) == read_json(out + "/summary.json"));
}

TEST_CASE("metrics: metrics.tensorboard false writes no event files", "[metrics][cli]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), tiny_recipe());
  auto r = run_recipe(dir.file("r.yaml"), dir.file("run"), {"train.max_steps=2", "metrics.tensorboard=false"});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(fs::exists(dir.file("run/metrics.jsonl")));
  CHECK_FALSE(fs::exists(dir.file("run/tensorboard")));
}
