// data.train.mixture end to end: two prepared datasets sampled 3:1, tokens
// per source in metrics.jsonl and summary.json, a resumed run equal to an
// uninterrupted one, and the recipe errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <set>

#include "test_util.h"

using namespace gputrain::test;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

// Two byte-level datasets from different parts of tinyshakespeare with disjoint letters: a's
// lowercase, b's uppercase (both keep spaces and paragraph breaks), so a sample's text names its source.
void prepare_sources(const TempDir& dir) {
  const std::string text = read_file(shared_data("tinyshakespeare.txt"));
  auto only_letters = [](std::string t, bool upper) {
    std::string out;
    for (char c : t)
      if (std::isalpha(static_cast<unsigned char>(c)))
        out += static_cast<char>(upper ? std::toupper(static_cast<unsigned char>(c))
                                       : std::tolower(static_cast<unsigned char>(c)));
      else if (c == ' ' || c == '\n') out += c;
    return out;
  };
  write_file(dir.file("a.txt"), only_letters(text.substr(0, 60000), false));
  write_file(dir.file("b.txt"), only_letters(text.substr(500000, 30000), true));
  for (const char* name : {"a", "b"}) {
    auto r = run_gputrain({"data", "prepare", dir.file(std::string(name) + ".txt"), "-o", dir.file(name), "--tokenizer",
                           "bytes", "--documents", "paragraphs", "--val-fraction", "0", "--progress", "off"});
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
  }
}

// The source of each sample a run trained on, step by step, read from the batches themselves
// (GPUTRAIN_TRACE_BATCHES, train/batch_trace.h): 'a' for lowercase text, 'b' for uppercase. A step
// of several ranks lists rank 0's samples, then rank 1's, ...
std::map<int64_t, std::string> sources_by_step(const std::string& trace, int ranks = 1) {
  std::map<int64_t, std::string> by_step;
  for (const auto& line : traced_batches(trace, ranks))
    for (const auto& row : line["input"]) {
      bool lower = false, upper = false;
      for (const auto& id : row) {
        const int64_t c = id.get<int64_t>();
        lower |= c >= 'a' && c <= 'z';
        upper |= c >= 'A' && c <= 'Z';
      }
      INFO(row.dump());
      REQUIRE(lower != upper);  // each sample is all one source's
      by_step[line["step"].get<int64_t>()] += lower ? 'a' : 'b';
    }
  return by_step;
}

std::string mixture_recipe(const std::string& sources) {
  return "run: {name: mix, threads: 2}\n"
         "model: {vocab_size: 320, seq_len: 16, n_layer: 1, n_head: 2, d_model: 16, dropout: 0.1}\n"
         "data:\n"
         "  train:\n"
         "    format: tokens\n"
         "    mixture: " +
         sources +
         "\n"
         "train: {per_device_batch_size: 4, max_steps: 12, log_every: 1}\n"
         "optim: {lr: 3e-3, schedule: {warmup_steps: 2, decay_steps: 12}}\n"
         "metrics: {progress: off}\n";
}

}  // namespace

TEST_CASE("cli: a mixture samples its sources by weight, reports tokens per source, and resumes exactly",
          "[cli][data][mixture]") {
  TempDir dir;
  prepare_sources(dir);
  write_file(dir.file("mix.yaml"),
             mixture_recipe("[{path: a/train_*.bin, weight: 3}, {path: b/train_*.bin, weight: 1}]"));
  const std::string straight = dir.file("straight"), resumed = dir.file("resumed");
  auto a = run_traced(dir.file("trace-straight"), {"run", dir.file("mix.yaml"), "--output-dir", straight});
  INFO(a.output);
  REQUIRE(a.exit_code == 0);
  CHECK_THAT(a.output, Contains("data: mixture of 2 sources: 75.0%") && Contains("; 25.0%"));
  const auto lines = step_records(straight);
  REQUIRE(lines.size() == 12);
  // What was trained on: 48 samples of 16 tokens, 36 from a and 12 from b (3:1), spread evenly: every
  // step's batch of 4 holds 3 of a and 1 of b. tokens_by_source counts what was read, step by step.
  const auto fed = sources_by_step(dir.file("trace-straight"));
  REQUIRE(fed.size() == 12);
  const std::string label_a = fs::absolute(dir.file("a/train_*.bin")).lexically_normal().string(),
                    label_b = fs::absolute(dir.file("b/train_*.bin")).lexically_normal().string();
  int64_t read_a = 0, read_b = 0;
  for (const auto& [step, sources] : fed) {
    INFO("step " << step << ": " << sources);
    read_a += std::count(sources.begin(), sources.end(), 'a');
    read_b += std::count(sources.begin(), sources.end(), 'b');
    CHECK(std::count(sources.begin(), sources.end(), 'b') == 1);
    const auto& by_source = lines[static_cast<size_t>(step - 1)]["tokens_by_source"];
    CHECK(by_source[label_a] == read_a * 16);
    CHECK(by_source[label_b] == read_b * 16);
  }
  CHECK(read_a == 36);
  CHECK(read_b == 12);
  CHECK(lines.front()["tokens_by_source"].size() == 2);
  const auto summary = read_json(straight + "/summary.json");
  REQUIRE(summary["data_sources"].size() == 2);
  CHECK(summary["data_sources"][0]["weight"] == 3.0);
  CHECK(summary["data_sources"][0]["samples"] == read_a);
  CHECK(summary["data_sources"][1]["tokens"] == read_b * 16);

  // Stopped at step 5 and resumed: every step as in the uninterrupted run, fed the same samples.
  auto b1 = run_traced(dir.file("trace-resumed"),
                       {"run", dir.file("mix.yaml"), "--output-dir", resumed, "--set", "train.max_steps=5"});
  INFO(b1.output);
  REQUIRE(b1.exit_code == 0);
  auto b2 = run_traced(dir.file("trace-resumed"), {"run", dir.file("mix.yaml"), "--output-dir", resumed});
  INFO(b2.output);
  REQUIRE(b2.exit_code == 0);
  CHECK_THAT(b2.output, Contains("at step 5"));
  CHECK(step_records(resumed) == lines);
  const auto straight_rows = traced_batches(dir.file("trace-straight")),
             resumed_rows = traced_batches(dir.file("trace-resumed"));
  REQUIRE(resumed_rows.size() == 12);
  for (size_t i = 0; i < 12; ++i) CHECK(resumed_rows[i] == straight_rows[i]);

  // The same data as one source (weight 1) reads only it.
  write_file(dir.file("one.yaml"), mixture_recipe("[{path: a/train_*.bin, weight: 1}]"));
  auto one = run_recipe(dir.file("one.yaml"), dir.file("one"));
  INFO(one.output);
  REQUIRE(one.exit_code == 0);
  CHECK(read_json(dir.file("one/summary.json"))["data_sources"][0]["samples"] == 48);
}

TEST_CASE("cli: mixture recipes are validated: weights, files, and path beside mixture", "[cli][data][mixture]") {
  TempDir dir;
  prepare_sources(dir);
  auto validate = [&](const std::string& sources, const std::string& extra = "") {
    std::string recipe = mixture_recipe(sources);
    if (!extra.empty()) recipe.replace(recipe.find("    format: tokens\n"), 19, "    format: tokens\n" + extra);
    write_file(dir.file("v.yaml"), recipe);
    return run_gputrain({"validate", dir.file("v.yaml")});
  };
  auto ok = validate("[{path: a/train_*.bin, weight: 0.5}, {path: b/train_*.bin, weight: 0.5}]");
  INFO(ok.output);
  CHECK(ok.exit_code == 0);
  auto zero = validate("[{path: a/train_*.bin, weight: 0}]");
  CHECK(zero.exit_code == 2);
  CHECK_THAT(zero.output, Contains("data.train.mixture") && Contains("must be > 0"));
  auto no_weight = validate("[{path: a/train_*.bin}]");
  CHECK(no_weight.exit_code == 2);
  CHECK_THAT(no_weight.output, Contains("source 1 has no weight"));
  auto unknown = validate("[{path: a/train_*.bin, weight: 1, packing: documents}]");
  CHECK(unknown.exit_code == 2);
  CHECK_THAT(unknown.output, Contains("source 1 has the unknown key 'packing'"));
  auto missing = validate("[{path: a/train_*.bin, weight: 1}, {path: nowhere.bin, weight: 1}]");
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.output, Contains("data.train.mixture") && Contains("nowhere.bin' does not exist"));
  auto empty_glob = validate("[{path: a/train_*.bin, weight: 1}, {path: c/train_*.bin, weight: 1}]");
  CHECK(empty_glob.exit_code == 2);
  CHECK_THAT(empty_glob.output, Contains("data.train.mixture[1]"));
  auto both = validate("[{path: a/train_*.bin, weight: 1}]", "    path: b/train_*.bin\n");
  CHECK(both.exit_code == 2);
  CHECK_THAT(both.output, Contains("data.train.path: is set beside data.train.mixture"));
}

TEST_CASE("cli: a mixture read by 2 processes is the mixture read by 1 with the same global batch",
          "[cli][data][mixture][slow]") {
  TempDir dir;
  prepare_sources(dir);
  write_file(dir.file("mix.yaml"),
             mixture_recipe("[{path: a/train_*.bin, weight: 2}, {path: b/train_*.bin, weight: 1}]"));
  auto one = run_traced(dir.file("trace-one"), {"run", dir.file("mix.yaml"), "--output-dir", dir.file("one"), "--set",
                                                "run.threads=1", "--set", "model.dropout=0"});
  INFO(one.output);
  REQUIRE(one.exit_code == 0);
  auto two = run_traced(dir.file("trace-two"),
                        {"run", dir.file("mix.yaml"), "--output-dir", dir.file("two"), "--nproc-per-node", "2", "--set",
                         "run.threads=1", "--set", "model.dropout=0", "--set", "train.per_device_batch_size=2"});
  INFO(two.output);
  REQUIRE(two.exit_code == 0);
  const auto a = read_jsonl(dir.file("one/metrics.jsonl")), b = read_jsonl(dir.file("two/metrics.jsonl"));
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(std::abs(a[i]["loss"].get<double>() - b[i]["loss"].get<double>()) < 1e-5);
    CHECK(a[i]["tokens_by_source"] == b[i]["tokens_by_source"]);
  }
  // The two ranks together were fed the samples one process was, step by step (2:1 of a and b).
  const auto fed_one = sources_by_step(dir.file("trace-one")), fed_two = sources_by_step(dir.file("trace-two"), 2);
  REQUIRE(fed_one.size() == 12);
  CHECK(fed_two.size() == 12);
  auto rows_of = [](const std::string& trace, int ranks) {
    std::map<int64_t, std::multiset<std::string>> rows;
    for (const auto& line : traced_batches(trace, ranks))
      for (const auto& row : line["input"]) rows[line["step"].get<int64_t>()].insert(row.dump());
    return rows;
  };
  const bool same_samples = rows_of(dir.file("trace-one"), 1) == rows_of(dir.file("trace-two"), 2);
  CHECK(same_samples);
  int64_t from_a = 0;
  for (const auto& [step, sources] : fed_one) from_a += std::count(sources.begin(), sources.end(), 'a');
  CHECK(from_a == read_json(dir.file("one/summary.json"))["data_sources"][0]["samples"]);
  CHECK(std::abs(from_a - 32) <= 1);  // 48 samples at 2:1
}
