// What a run leaves for watching it, through the gputrain binary: TensorBoard event files read back
// with the tensorboard package (PyPI) and compared with metrics.jsonl, across a resume.
#include <catch2/catch.hpp>

#include <cmath>

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

namespace {

json render_report(const std::string& html, const std::string& fragment, const std::string& png,
                   const std::string& out) {
  const CommandResult r =
      run_python({std::string(GPUTRAIN_SOURCE_DIR) + "/tests/reference/render_report.py", html, fragment, png, out});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return read_json(out);
}

// The paths of one chart: (run, key) -> points.
std::map<std::pair<int, std::string>, int64_t> chart_paths(const json& rendered, const std::string& chart) {
  std::map<std::pair<int, std::string>, int64_t> out;
  for (const json& p : rendered["paths"])
    if (p["chart"] == chart) {
      CHECK(p["moves"] == p["points"]);  // one M/L per point
      out[{p["run"].get<int>(), p["key"].get<std::string>()}] = p["points"].get<int64_t>();
    }
  return out;
}

// The (step, value) points drawn for `key` of run `run` in `chart`, read back through the chart's axis
// (tests/reference/render_report.py); fails the test when no such path was drawn.
std::vector<std::pair<double, double>> drawn(const json& rendered, const std::string& chart, int run,
                                             const std::string& key) {
  for (const json& p : rendered["paths"])
    if (p["chart"] == chart && p["run"] == run && p["key"] == key) {
      REQUIRE(p["values"].is_array());
      return p["values"].get<std::vector<std::pair<double, double>>>();
    }
  FAIL("no path of " << key << " (run " << run << ") in the " << chart << " chart");
  return {};
}

// (step, value) of `key` in each metrics line that has it; with `smoothing` > 0 TensorBoard's debiased
// exponential moving average of the values, computed here.
std::vector<std::pair<double, double>> logged(const std::vector<json>& lines, const std::string& key,
                                              double smoothing = 0) {
  std::vector<std::pair<double, double>> out;
  double ema = 0;
  for (const json& l : lines) {
    if (!l.contains(key) || l[key].is_null()) continue;
    const double y = l[key].get<double>();
    ema = smoothing * ema + (1 - smoothing) * y;
    out.emplace_back(l["step"].get<double>(),
                     smoothing > 0 ? ema / (1 - std::pow(smoothing, static_cast<double>(out.size() + 1))) : y);
  }
  return out;
}

// Drawn points equal the expected ones: the steps within a twentieth of a step, the values within
// 1% of the values' range (a pixel of the 192-pixel plot is 0.6% of the drawn span, which the
// axis pads by 5% on each side).
void check_drawn(const std::vector<std::pair<double, double>>& got,
                 const std::vector<std::pair<double, double>>& want) {
  REQUIRE(got.size() == want.size());
  REQUIRE(want.size() >= 2);
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& [x, y] : want) lo = std::min(lo, y), hi = std::max(hi, y);
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("point " << i << ": drawn (" << got[i].first << ", " << got[i].second << "), logged (" << want[i].first << ", "
                  << want[i].second << ")");
    CHECK(std::abs(got[i].first - want[i].first) < 0.05);
    CHECK(std::abs(got[i].second - want[i].second) < 0.01 * (hi - lo));
  }
}

int64_t lines_with(const std::vector<json>& lines, const std::string& key) {
  return std::count_if(lines.begin(), lines.end(), [&](const json& l) { return l.contains(key); });
}

}  // namespace

TEST_CASE("metrics: gputrain report draws two runs' curves, summaries and recipe differences in Chromium",
          "[metrics][cli]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), tiny_recipe());
  const std::string a = dir.file("lr3e-3"), b = dir.file("fp16");
  REQUIRE(run_recipe(dir.file("r.yaml"), a, {"train.max_steps=8"}).exit_code == 0);
  REQUIRE(run_recipe(dir.file("r.yaml"), b, {"train.max_steps=8", "optim.lr=1e-3", "precision.mode=fp16"}).exit_code ==
          0);
  const std::string html = dir.file("report.html");
  auto r = run_gputrain({"report", a, b, "-o", html});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);

  const json view = render_report(html, "", dir.file("report.png"), dir.file("view.json"));
  const std::vector<json> la = read_jsonl(a + "/metrics.jsonl"), lb = read_jsonl(b + "/metrics.jsonl");
  // Each run's loss, eval loss and lr drawn with every logged point; the loss scale only for fp16.
  auto loss = chart_paths(view, "loss");
  CHECK(loss.size() == 4);
  CHECK(loss[{0, "loss"}] == lines_with(la, "loss"));
  CHECK(loss[{1, "loss"}] == lines_with(lb, "loss"));
  CHECK(loss[{0, "eval_loss"}] == lines_with(la, "eval_loss"));
  CHECK(loss[{1, "eval_loss"}] == lines_with(lb, "eval_loss"));
  for (const char* chart : {"lr", "grad_norm", "tokens_per_s", "step_ms", "mem_peak_mb"}) {
    INFO(chart);
    auto paths = chart_paths(view, chart);
    CHECK(paths.size() == 2);
    CHECK(paths[{0, chart}] == lines_with(la, chart));
  }
  // The curves' values, read off the charts' own axes, are the logged ones.
  for (int run : {0, 1}) {
    INFO("run " << run);
    const auto& lines = run == 0 ? la : lb;
    check_drawn(drawn(view, "loss", run, "loss"), logged(lines, "loss"));
    check_drawn(drawn(view, "lr", run, "lr"), logged(lines, "lr"));
    check_drawn(drawn(view, "grad_norm", run, "grad_norm"), logged(lines, "grad_norm"));
  }
  auto scale = chart_paths(view, "loss_scale");
  CHECK(scale.size() == 1);
  CHECK(scale.count({1, "loss_scale"}) == 1);
  CHECK(chart_paths(view, "mfu").empty());  // no MFU on the CPU: no chart

  // The summary table from summary.json, the recipe keys that differ (and no per-run paths).
  REQUIRE(view["summary_rows"].size() == 2);
  CHECK(view["summary_rows"][0][0] == "lr3e-3");
  CHECK(view["summary_rows"][1][1] == "ok");
  CHECK(view["summary_rows"][1][2] == "8");
  CHECK(view["difference_keys"] == json::array({"optim.lr", "precision.mode"}));
  // Self-contained: no URL but the SVG namespace's.
  CHECK(view["urls"] == json::array({"http://www.w3.org/2000/svg"}));
  // The screenshot shows both runs' colours (curves and legend).
  CHECK(view["png"]["width"] == 1400);
  CHECK(view["png"]["colors"]["#1f77b4"] > 300);
  CHECK(view["png"]["colors"]["#d62728"] > 300);
  CHECK(view["png"]["colors"]["#2ca02c"] == 0);

  // The log-scale toggle from the URL: the loss chart redrawn on a log axis.
  const json log_view = render_report(html, "log=1", dir.file("log.png"), dir.file("log.json"));
  int loss_paths = 0;
  for (const json& p : log_view["paths"])
    if (p["chart"] == "loss") {
      CHECK(p["scale"] == "log");
      ++loss_paths;
    }
  CHECK(loss_paths == 4);
  // Read through the log axis (its labels are powers or round values, placed by their logarithms).
  check_drawn(drawn(log_view, "loss", 0, "loss"), logged(la, "loss"));
  check_drawn(drawn(log_view, "loss", 1, "loss"), logged(lb, "loss"));

  // Smoothing from the URL: the loss drawn is the debiased moving average of the logged losses (the
  // eval loss is never smoothed).
  const json smooth_view = render_report(html, "smooth=0.6", dir.file("smooth.png"), dir.file("smooth.json"));
  check_drawn(drawn(smooth_view, "loss", 0, "loss"), logged(la, "loss", 0.6));
  check_drawn(drawn(smooth_view, "loss", 1, "loss"), logged(lb, "loss", 0.6));
  check_drawn(drawn(smooth_view, "lr", 0, "lr"), logged(la, "lr", 0.6));
}

TEST_CASE("metrics: gputrain report refuses a folder that is no run", "[metrics][cli]") {
  TempDir dir;
  fs::create_directories(dir.file("empty"));
  auto r = run_gputrain({"report", dir.file("empty"), "-o", dir.file("r.html")});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Contains("empty") && Contains("no metrics.jsonl") && Contains("fix:"));
  CHECK_FALSE(fs::exists(dir.file("r.html")));
  auto missing = run_gputrain({"report", dir.file("nowhere")});
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.output, Contains("nowhere"));
}
