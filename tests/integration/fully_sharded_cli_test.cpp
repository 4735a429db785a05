// ZeRO-3 (parallel.zero: 3) on this machine (Gloo): 2 and 4 processes against one, the memory
// each rank holds, resuming on other world sizes and stages, and what it is not combined with.
#include <catch2/catch.hpp>

#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/safetensors.h"
#include "parallel_runs.h"
#include "same_tensors.h"
#include "test_util.h"

using namespace gputrain::test;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

// `sets` with micro-batches of 2 on 3 ZeRO-3 ranks (and checkpoints every 10 steps).
std::vector<std::string> on_three(std::vector<std::string> sets) {
  sets.insert(sets.end(), {"train.per_device_batch_size=2", "parallel.zero=3", "checkpoint.every=10"});
  return sets;
}

// `sets` on one process (dir/<name>-one, micro-batches of 6) and on 3 ZeRO-3 ranks (dir/<name>),
// checkpoints every 10 steps; the ranks' losses and gradient norms within `tolerance` of the process's.
CommandResult one_and_three(const TempDir& dir, const std::string& name, const std::vector<std::string>& sets,
                            double tolerance) {
  std::vector<std::string> one_sets = sets;
  one_sets.insert(one_sets.end(), {"train.per_device_batch_size=6", "checkpoint.every=10"});
  const std::string one = dir.file(name + "-one");
  auto r1 = train(dir.file("r.yaml"), one, 0, one_sets);
  INFO(r1.output);
  REQUIRE(r1.exit_code == 0);
  return train_like_one_process(dir, dir.file("r.yaml"), Variant{name.c_str(), on_three(sets), 3}, column(one, "loss"),
                                column(one, "grad_norm"), tolerance);
}

// Of one_and_three's runs, the ranks' step-10 checkpoint resumes on 1 process and on 2 ranks, and
// the process's on 3 ranks, each continuing the process's losses within 1e-5.
void check_resumes_of_three(const TempDir& dir, const std::string& name, const std::vector<std::string>& sets) {
  const std::string one = dir.file(name + "-one");
  const size_t after = column(one, "loss").size() - 10;
  const std::vector<std::pair<int, std::string>> resumes = {{0, "train.per_device_batch_size=6"},
                                                            {2, "train.per_device_batch_size=3"}};
  for (const auto& [nproc, batch] : resumes) {
    std::vector<std::string> with = sets;
    with.push_back(batch);
    if (nproc > 0) with.push_back("parallel.zero=3");
    const std::string out = dir.file(name + "-resumed-" + std::to_string(nproc));
    const auto resumed =
        train(dir.file("r.yaml"), out, nproc, with_resume(with, dir.file(name) + "/checkpoints/step_00000010"));
    INFO(resumed.output);
    REQUIRE(resumed.exit_code == 0);
    check_continues(column(one, "loss"), column(out, "loss"), after, 1e-5);
  }
  std::vector<std::string> back = on_three(sets);
  back.pop_back();  // no checkpoint.every
  const auto b =
      train(dir.file("r.yaml"), dir.file(name + "-back"), 3, with_resume(back, one + "/checkpoints/step_00000010"));
  INFO(b.output);
  REQUIRE(b.exit_code == 0);
  check_continues(column(one, "loss"), column(dir.file(name + "-back"), "loss"), after, 1e-5);
}

}  // namespace

TEST_CASE("parallel: a ZeRO-3 rank's resident memory, measured by the kernel, is a third of one process's",
          "[parallel][cli][memory][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  // 9.6M parameters in 12 blocks: weights, gradients and AdamW state are about 150 MiB in one process,
  // against which activations (one short sequence) and communication buffers are small. The default
  // host allocator never holds more than was in use at once (util/host_allocator.h).
  const std::vector<std::string> big = {
      "model.n_layer=12", "model.d_model=256", "model.n_head=4", "train.max_steps=2", "train.per_device_batch_size=1",
      "run.threads=1"};
  std::vector<std::string> tiny = big;
  tiny[0] = "model.n_layer=1", tiny[1] = "model.d_model=16";
  const std::vector<std::string> zero3 = {"parallel.zero=3"};
  // What the model adds: each peak over the same run's with a 1-block, 16-wide model (LibTorch, Gloo
  // and the data held alike).
  const double one = training_peak_mb(dir, "one", 1, big)[0] - training_peak_mb(dir, "one-tiny", 1, tiny)[0];
  const auto ranks = training_peak_mb(dir, "zero3", 4, with(big, zero3)),
             ranks_tiny = training_peak_mb(dir, "zero3-tiny", 4, with(tiny, zero3));
  const double base = *std::max_element(ranks_tiny.begin(), ranks_tiny.end());
  INFO("one process: +" << one << " MiB");
  CHECK(one > 130);
  for (double rank : ranks) {
    // A quarter of the weights, gradients and state (4 bytes a parameter against 16) and a few blocks'
    // whole weights while in use: measured 0.32 of one process's (2026-11-27). Gathered weights left
    // whole after use measured 0.49.
    INFO("ZeRO-3 rank: +" << rank - base << " MiB");
    CHECK(rank - base < 0.4 * one);
    CHECK(rank - base > 0.2 * one);
  }
}

TEST_CASE("parallel: no ZeRO-3 rank ever holds the whole model, building it included: each rank's peaks",
          "[parallel][cli][memory][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  // 37.8M parameters (145 MiB in fp32) in 12 blocks, plain SGD (no optimizer state): a rank keeps a
  // quarter of the weights and of their gradients (0.5x the model) plus the units it gathers.
  const std::vector<std::string> big = {"model.n_layer=12",
                                        "model.d_model=512",
                                        "model.n_head=8",
                                        "train.max_steps=2",
                                        "train.per_device_batch_size=1",
                                        "optim.name=sgd",
                                        "optim.sgd.momentum=0",
                                        "parallel.zero=3"};
  std::vector<std::string> tiny = big;
  tiny[0] = "model.n_layer=1", tiny[1] = "model.d_model=16", tiny[2] = "model.n_head=2";
  std::vector<double> built, built_tiny;
  const auto ranks = training_peak_mb(dir, "zero3", 4, big, &built),
             ranks_tiny = training_peak_mb(dir, "zero3-tiny", 4, tiny, &built_tiny);
  const double model_mb = read_json(dir.file("zero3") + "/summary.json")["parameters"].get<double>() * 4 / 1048576;
  const double base = *std::max_element(ranks_tiny.begin(), ranks_tiny.end()),
               built_base = *std::max_element(built_tiny.begin(), built_tiny.end());
  INFO("fp32 model: " << model_mb << " MiB");
  CHECK(model_mb > 140);
  for (size_t r = 0; r < ranks.size(); ++r) {
    // Up to the first step: its shards (a quarter) and a piece being filled. Measured 0.26 of the
    // model (2026-11-28 and 2026-12-01, as docs/benchmarks.md says); built whole and then cut, as before, 1.00.
    INFO("ZeRO-3 rank: +" << built[r] - built_base << " MiB until its first step, +" << ranks[r] - base
                          << " MiB over its life");
    std::cout << "ZeRO-3 rank " << r << ": until its first step " << (built[r] - built_base) / model_mb
              << " of the fp32 model, over its life " << (ranks[r] - base) / model_mb << std::endl;
    CHECK(built[r] - built_base < 0.32 * model_mb);
    CHECK(built[r] - built_base > 0.2 * model_mb);
    // Training adds the gradients' quarter and the units gathered and reduced (at 38M each of the 12
    // blocks is 0.08 of the model; the 354M test above holds the docs' 0.75): measured 0.88-0.91
    // (2026-12-01), held within 10%.
    CHECK(ranks[r] - base < 1.0 * model_mb);
    CHECK(ranks[r] - base > 0.5 * model_mb);
  }
  // The same model from files: model.init_from a Hugging Face folder (this run's export), and this
  // run resumed from its checkpoint. Each rank reads only its rows' bytes, so its start stays as low.
  REQUIRE(run_gputrain({"export", dir.file("zero3"), "--out", dir.file("hf")}).exit_code == 0);
  std::vector<double> from_hf, resumed;
  training_peak_mb(dir, "zero3-hf", 4, with(big, {"model.init_from=" + dir.file("hf")}), &from_hf);
  training_peak_mb(dir, "zero3", 4, with(big, {"train.max_steps=3"}), &resumed);
  for (const char* run : {"zero3-hf", "zero3"}) {
    const std::string log = read_file(dir.file(std::string(run) + ".log"));
    INFO(log);
    std::smatch read;
    REQUIRE(std::regex_search(log, read,
                              std::regex(R"(the 4 ranks read ([0-9., ]+) MiB of the ([0-9.]+) MiB of weights)")));
    const std::string list = read[1].str();
    const std::regex number("[0-9.]+");
    int ranks_listed = 0;
    for (auto it = std::sregex_iterator(list.begin(), list.end(), number); it != std::sregex_iterator(); ++it) {
      ++ranks_listed;
      CHECK(std::stod(it->str()) < 0.3 * std::stod(read[2]));  // about a quarter
    }
    CHECK(ranks_listed == 4);
  }
  for (size_t r = 0; r < ranks.size(); ++r) {
    // Measured 0.30 (init_from) and 0.33 (resume) of the model (2026-12-01), held within 20%; read whole
    // before, 1.0 or more.
    std::cout << "ZeRO-3 rank " << r << " until its first step: " << (from_hf[r] - built_base) / model_mb
              << " of the model from Hugging Face files, " << (resumed[r] - built_base) / model_mb << " resumed"
              << std::endl;
    CHECK(from_hf[r] - built_base < 0.4 * model_mb);
    CHECK(resumed[r] - built_base < 0.4 * model_mb);
  }
  // LoRA on those files with the adapters saved alone (model.lora.save: adapters, the default): the
  // frozen base's fingerprint is taken by parts too. Every rank built the whole base for it before.
  std::vector<double> lora;
  training_peak_mb(dir, "zero3-lora", 4, with(big, {"model.init_from=" + dir.file("hf"), "model.lora.rank=8"}), &lora);
  for (size_t r = 0; r < lora.size(); ++r) {
    // Measured 0.31 (2026-12-01).
    std::cout << "LoRA rank " << r << " until its first step: " << (lora[r] - built_base) / model_mb << " of the model"
              << std::endl;
    CHECK(lora[r] - built_base < 0.4 * model_mb);
  }
}

TEST_CASE("parallel: a 354M GPT under ZeRO-3 over 4 processes peaks at most 0.75x its fp32 model per rank",
          "[parallel][cli][memory][slow]") {
  TempDir dir;
  // docs/benchmarks.md ("The vocabulary tables by parts"): GPT-2 medium's shape (24 x 1024, vocab 50304,
  // 1.35 GiB in fp32), plain SGD, one 64-token sequence per step, the default settings otherwise.
  // "Above" is each rank's life peak minus the same run's with a 1-block, 16-wide model (LibTorch, Gloo and
  // the vocabulary-wide logits alike), over the fp32 model.
  write_file(dir.file("r.yaml"),
             "model: {vocab_size: 50304, seq_len: 64, n_layer: 24, n_head: 16, d_model: 1024}\n"
             "data: {train: {format: synthetic, synthetic: {kind: uniform}}}\n"
             "train: {per_device_batch_size: 1, max_steps: 2, eval_every: 0}\n"
             "optim: {name: sgd, lr: 0.001, sgd: {momentum: 0}}\n"
             "parallel: {zero: 3}\n"
             "checkpoint: {every: 0, at_end: false}\n"
             "metrics: {progress: off}\n");
  std::vector<double> built, built_tiny;
  const auto ranks = training_peak_mb(dir, "big", 4, {}, &built),
             tiny = training_peak_mb(dir, "tiny", 4, {"model.n_layer=1", "model.d_model=16", "model.n_head=2"},
                                     &built_tiny);
  const double model_mb = read_json(dir.file("big") + "/summary.json")["parameters"].get<double>() * 4 / 1048576;
  REQUIRE(model_mb > 1300);
  const double base = *std::max_element(tiny.begin(), tiny.end());
  for (size_t r = 0; r < ranks.size(); ++r) {
    const double above = (ranks[r] - base) / model_mb;
    std::cout << "354M, ZeRO-3 rank " << r << ": life peak " << ranks[r] << " MiB, " << above
              << " of the fp32 model above the tiny run" << std::endl;
    // Measured 0.64-0.65 with the default host allocator (2026-12-02; 0.72 with glibc's, returning freed
    // blocks, and 3.3x keeping them); the target is 0.75.
    CHECK(above < 0.75);
    CHECK(above > 0.5);  // a quarter of the weights and of their gradients at least
  }
}

TEST_CASE(
    "parallel: a padded vocabulary under model.init_from keeps a fresh build's padding rows, on 1 process and on 4 "
    "ZeRO-3 ranks by parts",
    "[parallel][cli]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  // 260 tokens padded to 320: 60 rows that no Hugging Face folder holds (export cuts them). A learning rate
  // of 1e-30 leaves every fp32 weight as it started (the update is far below half an ulp), so the step-1
  // checkpoint shows the weights the run started from.
  const std::vector<std::string> padded = {"model.vocab_size=260", "model.pad_vocab_to_multiple_of=64",
                                           "train.max_steps=1", "optim.lr=1e-30", "optim.schedule.warmup_steps=0"};
  for (const bool tied : {true, false}) {
    const std::string name = tied ? "tied" : "untied";
    INFO(name);
    const std::vector<std::string> sets =
        with(padded, {std::string("model.tie_embeddings=") + (tied ? "true" : "false")});
    // A fresh build's padding rows, and a trained model's real rows in a Hugging Face folder.
    REQUIRE(train(dir.file("r.yaml"), dir.file(name + "-fresh"), 0, sets).exit_code == 0);
    std::vector<std::string> trained = sets;
    trained[2] = "train.max_steps=3", trained[3] = "optim.lr=3e-3";
    REQUIRE(train(dir.file("r.yaml"), dir.file(name + "-trained"), 0, trained).exit_code == 0);
    REQUIRE(run_gputrain({"export", dir.file(name + "-trained"), "--out", dir.file(name + "-hf")}).exit_code == 0);
    auto tables = [&](const std::string& run) {
      std::map<std::string, torch::Tensor> out;
      for (auto& w :
           gputrain::read_checkpoint_model(gputrain::list_checkpoints(fs::path(run) / "checkpoints").complete.back()))
        if (w.name == "transformer.wte.weight" || w.name == "lm_head.weight") out[w.name] = w.tensor;
      return out;
    };
    const auto fresh = tables(dir.file(name + "-fresh")), hf_rows = tables(dir.file(name + "-trained"));
    REQUIRE(fresh.size() == (tied ? 1u : 2u));
    const std::vector<std::string> from_hf = with(sets, {"model.init_from=" + dir.file(name + "-hf")});
    for (const int nproc : {0, 4}) {
      const std::string run = dir.file(name + "-init-" + std::to_string(nproc));
      const auto r = train(dir.file("r.yaml"), run, nproc, nproc ? with(from_hf, {"parallel.zero=3"}) : from_hf);
      INFO(r.output);
      REQUIRE(r.exit_code == 0);
      for (const auto& [table, got] : tables(run)) {
        INFO(table << " on " << (nproc ? "4 ZeRO-3 ranks" : "1 process"));
        REQUIRE(got.size(0) == 320);
        const torch::Tensor padding = got.narrow(0, 260, 60);
        // A fresh build's values exactly (not zeros, not whatever memory held), and the file's real rows.
        CHECK(torch::equal(padding, fresh.at(table).narrow(0, 260, 60)));
        CHECK(padding.count_nonzero().item<int64_t>() == padding.numel());
        const torch::Tensor trained_rows = hf_rows.at(table).narrow(0, 0, 260);
        CHECK(torch::equal(got.narrow(0, 0, 260), trained_rows));
        CHECK_FALSE(torch::equal(trained_rows, fresh.at(table).narrow(0, 0, 260)));
      }
    }
  }
}

TEST_CASE("parallel: ZeRO-3 never puts a large vocabulary's table or its gradient together on one rank",
          "[parallel][cli][memory][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  // 14.5M parameters (55 MiB in fp32), 89% of them the tied 50304 x 256 table: the head multiplies by
  // it and the embedding's gradient touches a few of its rows. Plain SGD: a rank keeps a quarter of the
  // weights and of their gradients (0.5x the model).
  const std::vector<std::string> big = {
      "model.vocab_size=50304",        "model.n_layer=2", "model.d_model=256",    "model.n_head=4", "train.max_steps=2",
      "train.per_device_batch_size=1", "optim.name=sgd",  "optim.sgd.momentum=0", "parallel.zero=3"};
  std::vector<std::string> tiny = big;
  tiny[0] = "model.vocab_size=256", tiny[1] = "model.n_layer=1", tiny[2] = "model.d_model=16",
  tiny[3] = "model.n_head=2";
  const auto parts = training_peak_mb(dir, "parts", 4, big), tiny_runs = training_peak_mb(dir, "tiny", 4, tiny);
  // parallel.reshard_after_forward off keeps the table gathered and its gradient whole (speed over memory).
  const auto whole = training_peak_mb(dir, "whole", 4, with(big, {"parallel.reshard_after_forward=false"}));
  const double model_mb = read_json(dir.file("parts") + "/summary.json")["parameters"].get<double>() * 4 / 1048576;
  const double base = *std::max_element(tiny_runs.begin(), tiny_runs.end());
  INFO("fp32 model: " << model_mb << " MiB");
  CHECK(model_mb > 50);
  for (size_t r = 0; r < parts.size(); ++r) {
    // Measured 0.84 of the model by parts and 3.0 gathered (2026-11-29; by parts 0.87 in
    // bench/rank_memory.py's run of this shape with the default host allocator, 2026-12-02). The table gathered once
    // beside the rank's shards would already be 1.1.
    INFO("rank " << r << ": +" << parts[r] - base << " MiB by parts, +" << whole[r] - base << " MiB whole");
    CHECK(parts[r] - base < 1.0 * model_mb);
    CHECK(whole[r] - base > 2.0 * model_mb);
  }
  // The same losses either way (the sums run in another order).
  const auto a = column(dir.file("parts"), "loss"), b = column(dir.file("whole"), "loss");
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(b[i]).epsilon(1e-5));
}

TEST_CASE("parallel: ZeRO-3 with 2 and 4 processes matches 1 process, and each rank holds about 1/N",
          "[parallel][cli][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  REQUIRE(train(dir.file("r.yaml"), dir.file("one"), 0, {}).exit_code == 0);
  const auto loss1 = column(dir.file("one"), "loss");
  const auto norm1 = column(dir.file("one"), "grad_norm");
  const auto one = read_json(dir.file("one") + "/summary.json")["memory_per_rank"][0];

  // Tolerance 1e-5: the same sums in another order (float32 reductions over ranks).
  const std::vector<Variant> variants = {
      {"dp2", {"train.per_device_batch_size=2", "parallel.zero=3"}},
      {"dp4", {"train.per_device_batch_size=1", "parallel.zero=3"}, 4},
      {"accum", {"train.per_device_batch_size=1", "train.grad_accum_steps=2", "parallel.zero=3"}},
      // Recomputation replays each block inside its backward: the block's weights are gathered then.
      {"recompute", {"train.per_device_batch_size=2", "parallel.zero=3", "train.gradient_checkpointing=full"}},
      {"keep", {"train.per_device_batch_size=2", "parallel.zero=3", "parallel.reshard_after_forward=false"}},
      {"clip", {"train.per_device_batch_size=2", "parallel.zero=3", "train.max_grad_norm=0.5"}},
      // fp16 loss scaling, from a scale that overflows for the first steps: every rank skips the same
      // steps as one process (micro-batches of one sequence on both sides round alike).
      {"fp16",
       {"train.per_device_batch_size=1", "train.grad_accum_steps=2", "parallel.zero=3", "precision.mode=fp16",
        "precision.init_scale=1e9"}},
  };
  for (const auto& v : variants) {
    SECTION(v.name) {
      std::vector<double> loss = loss1, norm = norm1;
      if (std::string(v.name) == "clip") {  // its own reference: clipping changes the updates
        REQUIRE(train(dir.file("r.yaml"), dir.file("one-clip"), 0, {"train.max_grad_norm=0.5"}).exit_code == 0);
        loss = column(dir.file("one-clip"), "loss");
        norm = column(dir.file("one-clip"), "grad_norm");
      }
      if (std::string(v.name) == "fp16") {
        REQUIRE(train(dir.file("r.yaml"), dir.file("one-fp16"), 0,
                      {"train.per_device_batch_size=1", "train.grad_accum_steps=4", "precision.mode=fp16",
                       "precision.init_scale=1e9"})
                    .exit_code == 0);
        loss = column(dir.file("one-fp16"), "loss");
        norm = column(dir.file("one-fp16"), "grad_norm");
      }
      // fp16 rounds each rank's products on its own: 2 processes of plain data parallelism differ from
      // one by 1.5e-5 in the gradient norm on an AVX-512 machine (2026-11-26), ZeRO-3 by 1.7e-5.
      const double tolerance = std::string(v.name) == "fp16" ? 5e-5 : 1e-5;
      const auto r = train_like_one_process(dir, dir.file("r.yaml"), v, loss, norm, tolerance);
      CHECK_THAT(r.output, Contains("ZeRO-3: this rank holds 1/" + std::to_string(v.nproc)));
      const auto s = read_json(dir.file(v.name) + "/summary.json");
      CHECK(s["tokens"] == read_json(dir.file("one") + "/summary.json")["tokens"]);
      // Per micro-batch: each of the 4 units (embeddings, 2 blocks, head) reduced once; gathered before
      // its forward, the blocks again before their backward unless kept (the head stays until its
      // backward). The tied vocabulary table is used by parts, one piece per rank here: broadcast for
      // the lookup, the head and the head's backward, reduced for the lookup's and the head's
      // gradients. Kept units gather it whole with the embeddings instead.
      const auto& z = s["zero3"];
      const int micro = std::string(v.name) == "accum" || std::string(v.name) == "fp16" ? 2 : 1;
      const bool keep = std::string(v.name) == "keep";
      const int pieces = keep ? 0 : v.nproc;
      if (std::string(v.name) == "fp16") {
        const auto skipped = column(dir.file("one-fp16"), "skipped_steps");
        CHECK(skipped.back() > 5);
        CHECK(column(dir.file(v.name), "skipped_steps") == skipped);
      }
      CHECK(z["reductions_per_step"].get<double>() == (4 + 2 * pieces) * micro);
      CHECK(z["gathers_per_step"].get<double>() == ((keep ? 4 : 6) + 3 * pieces) * micro);
      const auto& m = s["memory_per_rank"];
      REQUIRE(m.size() == static_cast<size_t>(v.nproc));
      // Weights, gradients and optimizer state: each rank 1/N of one process's (rows padded up).
      for (int r = 0; r < v.nproc; ++r)
        for (const char* k : {"weights_mb", "grads_mb", "optimizer_state_mb"}) {
          INFO(k << " of rank " << r);
          CHECK(m[r][k].get<double>() < 1.15 * one[k].get<double>() / v.nproc);
          CHECK(m[r][k].get<double>() > 0.9 * one[k].get<double>() / v.nproc);
        }
    }
  }
}

TEST_CASE("parallel: ZeRO-3 matches 1 process with bf16, untied embeddings, LoRA and mixture-of-experts layers",
          "[parallel][cli][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  const std::vector<std::pair<const char*, std::vector<std::string>>> models = {
      {"bf16", {"precision.mode=bf16"}},         // units gathered in fp32 (parallel.gather_dtype: weights)
      {"bf16-gather", {"precision.mode=bf16"}},  // in bf16 (auto), from the fp32 shards
      {"untied", {"model.tie_embeddings=false"}},
      // Experts no token reached on a rank have no gradient there: zeros go into the reduction.
      // (No capacity limit and no balancing loss: both depend on how the batch is split.)
      // LoRA: the frozen base is sharded and gathered too, without gradients.
      {"lora", {"model.lora.rank=4"}},
      {"moe", {"model.moe.experts=4", "model.moe.top_k=2", "model.moe.capacity_factor=0", "model.moe.aux_loss_coef=0"}},
  };
  for (const auto& [name, sets] : models) {
    SECTION(name) {
      const std::string one = dir.file(std::string(name) + "-one");
      auto r1 = train(dir.file("r.yaml"), one, 0, sets);
      INFO(r1.output);
      REQUIRE(r1.exit_code == 0);
      std::vector<std::string> sharded = sets;
      sharded.insert(sharded.end(), {"train.per_device_batch_size=2", "parallel.zero=3"});
      const std::string n = name;
      if (n == "bf16") sharded.push_back("parallel.gather_dtype=weights");
      // bf16 rounds the products of each rank's share of the batch on its own: a looser bound; bf16
      // weights (rounded once per gather rather than by autocast per use) looser still.
      const auto r = train_like_one_process(dir, dir.file("r.yaml"), Variant{name, sharded}, column(one, "loss"),
                                            column(one, "grad_norm"),
                                            n == "bf16"          ? 2e-3
                                            : n == "bf16-gather" ? 5e-3
                                                                 : 1e-5);
      if (n == "bf16-gather") {  // half the bytes of the same run's fp32 gathers
        CHECK_THAT(r.output, Contains("gathered only while in use, in bf16"));
        sharded.push_back("parallel.gather_dtype=weights");
        REQUIRE(train(dir.file("r.yaml"), dir.file("fp32-gather"), 2, sharded).exit_code == 0);
        auto gathered = [&](const std::string& run) {
          return read_json(dir.file(run) + "/summary.json")["zero3"]["gathered_mb_per_step"].get<double>();
        };
        CHECK(gathered(name) == Approx(gathered("fp32-gather") / 2).epsilon(0.02));
      }
    }
  }
}

TEST_CASE("parallel: Adafactor under ZeRO-3 sums its statistics over the ranks' rows and matches 1 process",
          "[parallel][cli][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  // 3 ranks: most row counts (vocab 256, MLP 128, 4 experts) leave the last shard padded.
  // 15 steps: past them rounding differences grow past 1e-5 (plain data parallelism over 3 processes
  // too: 2.4e-4 in the gradient norm at step 16 from 1e-6 at step 3, with the 2026-11-28 initialization).
  const std::vector<std::pair<const char*, std::vector<std::string>>> models = {
      {"adafactor", {"optim.name=adafactor", "train.max_steps=15"}},
      {"scaled",
       {"optim.name=adafactor", "optim.adafactor.scale_parameter=true", "optim.adafactor.relative_step=true",
        "optim.adafactor.beta1=0.9", "optim.weight_decay=0.1", "train.max_steps=15"}},
      // Experts stack 3-D weights sharded by expert (the third rank holds none): their statistics stay
      // local. (At step 17 a near tie tips the gradient norm by 2e-3 between 1 and 3 processes, ZeRO-0 too.)
      {"moe",
       {"optim.name=adafactor", "model.moe.experts=4", "model.moe.top_k=2", "model.moe.capacity_factor=0",
        "model.moe.aux_loss_coef=0", "train.max_steps=15"}},
  };
  for (const auto& [name, sets] : models) {
    SECTION(name) {
      // Gradient norms: 3 processes of plain data parallelism differ from one by up to 2.1e-5 in the
      // first 15 steps (2026-11-28 initialization; the mixture's 1.3e-5 on an AVX-512 machine), ZeRO-3 by 1.8e-5.
      const double tolerance = 5e-5;
      CHECK_THAT(one_and_three(dir, name, sets, tolerance).output, Contains("ZeRO-3: this rank holds 1/3"));
      // Its checkpoint (each rank's rows of the row statistics; the column statistics whole) resumes.
      check_resumes_of_three(dir, name, sets);
    }
  }
}

TEST_CASE("parallel: adamw8bit under ZeRO-3 quantizes the whole tensors' blocks: 3 ranks match 1 process and resume",
          "[parallel][cli][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  // min_8bit_size 100: every matrix and the 128-wide biases get 8-bit moments. Their shards start on a
  // 256-element block: the 256 embedding rows of 32 go 88, 88, 80 (not 86) and a bias sits whole on
  // the first rank, so each rank's blocks are one process's.
  const std::vector<std::string> sets = {"optim.name=adamw8bit", "optim.adamw8bit.min_8bit_size=100"};
  CHECK_THAT(one_and_three(dir, "8bit", sets, 1e-5).output,
             Contains("8-bit moments for 12 of 28 tensors"));  // as one process decides

  // Each rank wrote its rows of the codes and its blocks of the scales.
  const std::string step10 = dir.file("8bit") + "/checkpoints/step_00000010";
  const auto part = gputrain::read_safetensors(step10 + "/optimizer.rank1.safetensors");
  const auto blocks = nlohmann::json::parse(part.metadata.at("blocks"));
  CHECK(blocks["transformer.wte.weight.exp_avg_absmax"] == nlohmann::json{11, 32});
  CHECK(nlohmann::json::parse(part.metadata.at("rows"))["transformer.wte.weight.exp_avg_8bit"] ==
        nlohmann::json{88, 256});
  CHECK(read_json(step10 + "/trainer.json")["version"] == 2);
  CHECK(read_json(dir.file("8bit-one") + "/checkpoints/step_00000010/trainer.json")["version"] == 1);

  // Resumed on the same 3 ranks it ends with the same files, byte for byte: a shard's padding
  // (here the 128-wide biases', in the block of their real values) holds the code of zero again.
  auto again = train(dir.file("r.yaml"), dir.file("again"), 3, with_resume(on_three(sets), step10));
  INFO(again.output);
  REQUIRE(again.exit_code == 0);
  check_same_state_files(dir.file("8bit") + "/checkpoints/step_00000020",
                         dir.file("again") + "/checkpoints/step_00000020");
  // Other shard rows on 2 ranks, each rank keeping its own as it reads.
  check_resumes_of_three(dir, "8bit", sets);
}

TEST_CASE("parallel: ZeRO-3 with expert parallelism shards each expert over its replicas, as without ep, and resumes",
          "[parallel][cli][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  // (No capacity limit and no balancing loss: both depend on how the batch is split.)
  const std::vector<std::string> experts = {"model.moe.experts=4", "model.moe.top_k=2", "model.moe.capacity_factor=0",
                                            "model.moe.aux_loss_coef=0"};
  auto run = [&](const std::string& name, const std::vector<std::string>& extra) {
    auto r = train(dir.file("r.yaml"), dir.file(name), 4,
                   with(with(experts, {"train.per_device_batch_size=1", "parallel.zero=3"}), extra));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    return r;
  };
  auto differ = [&](const std::string& a, const std::string& b, const char* key, size_t steps = 0) {
    return max_abs_diff(column(dir.file(a), key), column(dir.file(b), key), steps);
  };
  // The reference: ZeRO-3 over the same 4 ranks with every expert on every rank (the split of the
  // batch decides the routing's near ties, so 1 process differs from both by up to 8e-5 here).
  run("no-ep", {});
  // ep 2: each expert on 2 ranks, its rows shared by them; ep 4: each on one rank, held whole.
  CHECK_THAT(run("ep2", {"parallel.ep=2"}).output, Contains("(its experts' 1/2, over their replicas)"));
  CHECK_THAT(run("ep4", {"parallel.ep=4"}).output, Contains("(its experts whole: no other rank holds them)"));
  for (const char* ep : {"ep2", "ep4"}) {
    INFO(ep);
    CHECK(differ("no-ep", ep, "loss") < 1e-5);
    CHECK(differ("no-ep", ep, "grad_norm") < 1e-5);
  }
  // Adafactor's statistics of an expert are summed over its replicas (ep 2) or its rank's alone
  // (ep 4). Its near-zero rows amplify rounding: a near tie at step 9 tips the gradient norm by up
  // to 1.7e-4 (7.2e-5 on another machine), and the runs agree within 2e-6 again from step 13. Losses
  // stay within 1e-5 (2026-11-29).
  run("adafactor", {"optim.name=adafactor"});
  const auto last_steps = [](std::vector<double> v) { return std::vector<double>(v.begin() + 12, v.end()); };
  for (const char* ep : {"2", "4"}) {
    const std::string name = std::string("adafactor-ep") + ep;
    run(name, {"optim.name=adafactor", std::string("parallel.ep=") + ep});
    CHECK(differ("adafactor", name, "loss") < 5e-5);
    CHECK(differ("adafactor", name, "grad_norm", 12) < 5e-4);
    CHECK(max_abs_diff(last_steps(column(dir.file("adafactor"), "grad_norm")),
                       last_steps(column(dir.file(name), "grad_norm")), 0) < 2e-5);
  }
  // 8-bit AdamW (the router's 4 rows of 32 pad their shard within one block): resumed on the same
  // ranks the files end byte for byte the same; on one process it continues within the ep tests' 1e-4.
  const std::vector<std::string> adam8 = {"optim.name=adamw8bit", "optim.adamw8bit.min_8bit_size=100"};
  const std::vector<std::string> sharded8 = with(adam8, {"parallel.ep=2", "checkpoint.every=10"});
  run("ep2-8bit", sharded8);
  const std::string step10 = dir.file("ep2-8bit") + "/checkpoints/step_00000010";
  run("ep2-8bit-again", with_resume(sharded8, step10));
  check_same_state_files(dir.file("ep2-8bit") + "/checkpoints/step_00000020",
                         dir.file("ep2-8bit-again") + "/checkpoints/step_00000020");
  const auto single = train(dir.file("r.yaml"), dir.file("single"), 0, with_resume(with(experts, adam8), step10));
  INFO(single.output);
  REQUIRE(single.exit_code == 0);
  check_continues(column(dir.file("ep2-8bit"), "loss"), column(dir.file("single"), "loss"), 10, 1e-4);
}

TEST_CASE(
    "parallel: ZeRO-3 evaluates with gathered weights as ZeRO-0 does, eval_steps and eval_full, also under a pipeline",
    "[parallel][cli][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  std::vector<std::string> eval = {"data.eval.format=text",
                                   "data.eval.path=" + shared_data("tinyshakespeare.txt"),
                                   "train.per_device_batch_size=2",
                                   "train.max_steps=12",
                                   "train.eval_every=6",
                                   "data.eval.span=[0.95,1.0]"};
  SECTION("eval_steps") { eval.push_back("train.eval_steps=2"); }
  SECTION("eval_full") {
    // 69 windows: rank 0 reads 35 (18 batches of 2), rank 1 34 (17): rank 1 runs one forward more,
    // without targets, so that every gather has both ranks.
    eval.back() = "data.eval.span=[0.95,0.952]";
    eval.push_back("train.eval_full=true");
  }
  int nproc = 2;
  SECTION("pipeline eval_full") {  // each stage's replicas evaluate every window (dp 2 x pp 2)
    eval.back() = "data.eval.span=[0.95,0.952]";
    eval.insert(eval.end(), {"train.eval_full=true", "parallel.pp=2", "model.tie_embeddings=false"});
    nproc = 4;
  }
  std::vector<std::string> zero3 = eval;
  zero3.push_back("parallel.zero=3");
  REQUIRE(train(dir.file("r.yaml"), dir.file("zero0"), nproc, eval).exit_code == 0);
  auto r = train(dir.file("r.yaml"), dir.file("zero3"), nproc, zero3);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  std::vector<double> a, b;
  for (const auto& l : read_jsonl(dir.file("zero0") + "/metrics.jsonl"))
    if (l.contains("eval_loss")) a.push_back(l["eval_loss"].get<double>());
  for (const auto& l : read_jsonl(dir.file("zero3") + "/metrics.jsonl"))
    if (l.contains("eval_loss")) b.push_back(l["eval_loss"].get<double>());
  REQUIRE(a.size() == 2);
  CHECK(max_abs_diff(a, b) < 1e-5);
}

TEST_CASE("parallel: a ZeRO-3 checkpoint of 4 processes resumes on 2 (ZeRO-3) and on 1, and exports",
          "[parallel][cli][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  REQUIRE(train(dir.file("r.yaml"), dir.file("one"), 0, {}).exit_code == 0);
  const auto straight = column(dir.file("one"), "loss");
  auto four = train(dir.file("r.yaml"), dir.file("four"), 4,
                    {"train.per_device_batch_size=1", "parallel.zero=3", "checkpoint.every=10"});
  INFO(four.output);
  REQUIRE(four.exit_code == 0);
  const std::string step10 = (fs::path(dir.file("four")) / "checkpoints" / "step_00000010").string();
  REQUIRE(fs::exists(step10));

  // Each rank wrote its own rows of every tensor (nothing gathered to rank 0) under one manifest;
  // loading joins them whole, so any world size and stage resumes it.
  const auto files = read_json(step10 + "/manifest.json")["files"];
  for (int r = 0; r < 4; ++r)
    for (const std::string stem : {"model", "optimizer"})
      CHECK(files.contains(stem + ".rank" + std::to_string(r) + ".safetensors"));
  CHECK_FALSE(fs::exists(step10 + "/model.safetensors"));
  const auto part = gputrain::read_safetensors(step10 + "/model.rank1.safetensors");
  CHECK(nlohmann::json::parse(part.metadata.at("rows"))["transformer.wte.weight"] == nlohmann::json{64, 256});
  REQUIRE(part.find("transformer.wte.weight") != nullptr);
  CHECK(part.find("transformer.wte.weight")->size(0) == 64);
  auto two = train(dir.file("r.yaml"), dir.file("two"), 2,
                   with_resume({"train.per_device_batch_size=2", "parallel.zero=3"}, step10));
  INFO(two.output);
  REQUIRE(two.exit_code == 0);
  check_continues(straight, column(dir.file("two"), "loss"), 10, 1e-5);
  // Each rank kept only its rows of the optimizer state as the files were read: half.
  std::smatch kept;
  REQUIRE(std::regex_search(two.output, kept, std::regex(R"(this rank keeps [0-9.]+ MiB \(([0-9]+)%\) of the)")));
  CHECK(kept[1] == "50");
  auto single = train(dir.file("r.yaml"), dir.file("single"), 0, with_resume({}, step10));
  INFO(single.output);
  REQUIRE(single.exit_code == 0);
  check_continues(straight, column(dir.file("single"), "loss"), 10, 1e-5);

  // A 1-process checkpoint resumes under ZeRO-3 too.
  REQUIRE(train(dir.file("r.yaml"), dir.file("one-ckpt"), 0, {"checkpoint.every=10"}).exit_code == 0);
  auto back = train(dir.file("r.yaml"), dir.file("back"), 2,
                    with_resume({"train.per_device_batch_size=2", "parallel.zero=3"},
                                (fs::path(dir.file("one-ckpt")) / "checkpoints" / "step_00000010").string()));
  INFO(back.output);
  REQUIRE(back.exit_code == 0);
  check_continues(straight, column(dir.file("back"), "loss"), 10, 1e-5);

  auto exported = run_gputrain({"export", dir.file("four"), "--out", dir.file("hf")});
  INFO(exported.output);
  CHECK(exported.exit_code == 0);
  CHECK(fs::exists(dir.file("hf") + "/model.safetensors"));
}

TEST_CASE("parallel: ZeRO-3 over dp 2 x tp 2 matches 1 process, and its per-rank checkpoint resumes at tp 1 and back",
          "[parallel][cli][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  REQUIRE(train(dir.file("r.yaml"), dir.file("one"), 0, {"checkpoint.every=10"}).exit_code == 0);
  const auto loss1 = column(dir.file("one"), "loss");
  // Each tp rank's shard of a split parameter is sharded again over its dp group.
  const Variant v{
      "dp2xtp2", {"train.per_device_batch_size=2", "parallel.zero=3", "parallel.tp=2", "checkpoint.every=10"}, 4};
  const auto r = train_like_one_process(dir, dir.file("r.yaml"), v, loss1, column(dir.file("one"), "grad_norm"), 1e-5);
  CHECK_THAT(r.output, Contains("tensor parallel: 12 of 28 parameter tensors split over 2 ranks") &&
                           Contains("ZeRO-3: this rank holds 1/2 of the rows"));
  const auto one = read_json(dir.file("one") + "/summary.json")["memory_per_rank"][0];
  const auto per_rank = read_json(dir.file(v.name) + "/summary.json")["memory_per_rank"];
  REQUIRE(per_rank.size() == 4);
  for (const auto& m : per_rank)
    for (const char* key : {"weights_mb", "optimizer_state_mb"}) {
      INFO(key);  // the split layers are a quarter, the embeddings and norms half
      CHECK(m[key].get<double>() < 0.35 * one[key].get<double>());
      CHECK(m[key].get<double>() > 0.25 * one[key].get<double>());
    }
  // Ranks 2 and 3 are tp rank 1 of the two dp ranks: their files hold rows of tp rank 1's shards.
  const std::string step10 = dir.file(v.name) + "/checkpoints/step_00000010";
  const auto part = gputrain::read_safetensors(step10 + "/model.rank3.safetensors");
  CHECK(part.metadata.at("tp_rank") == "1");
  CHECK(nlohmann::json::parse(part.metadata.at("rows"))["transformer.h.0.mlp.c_fc.weight"] == nlohmann::json{32, 64});
  auto single = train(dir.file("r.yaml"), dir.file("single"), 0, with_resume({}, step10));
  INFO(single.output);
  REQUIRE(single.exit_code == 0);
  check_continues(loss1, column(dir.file("single"), "loss"), 10, 1e-5);
  auto back = train(dir.file("r.yaml"), dir.file("back"), 4,
                    with_resume({"train.per_device_batch_size=2", "parallel.zero=3", "parallel.tp=2"},
                                dir.file("one") + "/checkpoints/step_00000010"));
  INFO(back.output);
  REQUIRE(back.exit_code == 0);
  check_continues(loss1, column(dir.file("back"), "loss"), 10, 1e-5);
  // On the same grid each rank reads only its tp rank's files and keeps its rows of them.
  auto same = train(dir.file("r.yaml"), dir.file("same"), 4,
                    with_resume({"train.per_device_batch_size=2", "parallel.zero=3", "parallel.tp=2"}, step10));
  INFO(same.output);
  REQUIRE(same.exit_code == 0);
  CHECK_THAT(same.output, Contains("of ZeRO-3 optimizer state it read"));
  check_continues(loss1, column(dir.file("same"), "loss"), 10, 1e-5);
}

TEST_CASE("parallel: ZeRO-3 under a pipeline (dp 2 x pp 2) matches 1 process, and its checkpoint resumes on 1 and back",
          "[parallel][cli][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  const std::vector<std::string> untied = {"model.tie_embeddings=false", "checkpoint.every=10"};
  REQUIRE(train(dir.file("r.yaml"), dir.file("one"), 0, untied).exit_code == 0);
  const auto loss1 = column(dir.file("one"), "loss");
  const auto one = read_json(dir.file("one") + "/summary.json")["memory_per_rank"][0];
  // Each stage's units are sharded over its dp group; micro-batches in flight (1F1B) or all
  // forwards first (GPipe) gather a unit again for each backward that needs it.
  for (const char* schedule : {"1f1b", "gpipe"}) {
    const Variant v{
        schedule,
        {"model.tie_embeddings=false", "checkpoint.every=10", "parallel.zero=3", "parallel.pp=2",
         std::string("parallel.pp_schedule=") + schedule, "train.per_device_batch_size=1", "train.grad_accum_steps=2"},
        4};
    const auto r =
        train_like_one_process(dir, dir.file("r.yaml"), v, loss1, column(dir.file("one"), "grad_norm"), 1e-5);
    CHECK_THAT(r.output, Contains("ZeRO-3: this rank holds 1/2 of the rows") && Contains("pipeline: stage 0 of 2"));
    const auto per_rank = read_json(dir.file(schedule) + "/summary.json")["memory_per_rank"];
    REQUIRE(per_rank.size() == 4);
    for (const auto& m : per_rank)
      for (const char* key : {"weights_mb", "optimizer_state_mb"}) {
        INFO(key);  // half a stage's: about a quarter of the model
        CHECK(m[key].get<double>() < 0.3 * one[key].get<double>());
        CHECK(m[key].get<double>() > 0.2 * one[key].get<double>());
      }
  }
  const std::string step10 = dir.file("1f1b") + "/checkpoints/step_00000010";
  auto single = train(dir.file("r.yaml"), dir.file("single"), 0, with_resume(untied, step10));
  INFO(single.output);
  REQUIRE(single.exit_code == 0);
  check_continues(loss1, column(dir.file("single"), "loss"), 10, 1e-5);
  auto back = train(dir.file("r.yaml"), dir.file("back"), 4,
                    with_resume({"model.tie_embeddings=false", "parallel.zero=3", "parallel.pp=2",
                                 "train.per_device_batch_size=1", "train.grad_accum_steps=2"},
                                dir.file("one") + "/checkpoints/step_00000010"));
  INFO(back.output);
  REQUIRE(back.exit_code == 0);
  check_continues(loss1, column(dir.file("back"), "loss"), 10, 1e-5);
}

TEST_CASE(
    "parallel: ZeRO-3 under a pipeline with tied embeddings matches 1 process, writes the embedding once, resumes",
    "[parallel][cli][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  // The first stage's embedding and the last stage's head share one weight: each stage shards its
  // copy over its dp group, and the pipeline's ends sum the two copies' gradients shard by shard.
  REQUIRE(train(dir.file("r.yaml"), dir.file("one"), 0, {"checkpoint.every=10"}).exit_code == 0);
  const auto loss1 = column(dir.file("one"), "loss");
  const std::vector<std::string> tied = {"parallel.zero=3", "parallel.pp=2", "train.per_device_batch_size=1",
                                         "train.grad_accum_steps=2", "checkpoint.every=10"};
  const auto r = train_like_one_process(dir, dir.file("r.yaml"), Variant{"tied", tied, 4}, loss1,
                                        column(dir.file("one"), "grad_norm"), 1e-5);
  CHECK_THAT(r.output, Contains("ZeRO-3: this rank holds 1/2 of the rows"));
  // Ranks 0 and 1 are the first stage's (dp 0 and 1), 2 and 3 the last's: only the first write it.
  const std::string step10 = dir.file("tied") + "/checkpoints/step_00000010";
  for (int rank = 0; rank < 4; ++rank) {
    INFO("rank " << rank);
    const std::string suffix = ".rank" + std::to_string(rank) + ".safetensors";
    const auto model = gputrain::read_safetensors(step10 + "/model" + suffix);
    const auto state = gputrain::read_safetensors(step10 + "/optimizer" + suffix);
    CHECK((model.find("transformer.wte.weight") != nullptr) == (rank < 2));
    CHECK((state.find("transformer.wte.weight.exp_avg") != nullptr) == (rank < 2));
  }
  // Resumed on the same ranks the files end byte for byte the same; on one process, and one
  // process's checkpoint on the pipeline, the losses continue.
  auto again = train(dir.file("r.yaml"), dir.file("again"), 4, with_resume(tied, step10));
  INFO(again.output);
  REQUIRE(again.exit_code == 0);
  check_same_state_files(dir.file("tied") + "/checkpoints/step_00000020",
                         dir.file("again") + "/checkpoints/step_00000020");
  auto single = train(dir.file("r.yaml"), dir.file("single"), 0, with_resume({}, step10));
  INFO(single.output);
  REQUIRE(single.exit_code == 0);
  check_continues(loss1, column(dir.file("single"), "loss"), 10, 1e-5);
  std::vector<std::string> back = tied;
  back.pop_back();  // no checkpoint.every
  auto b =
      train(dir.file("r.yaml"), dir.file("back"), 4, with_resume(back, dir.file("one") + "/checkpoints/step_00000010"));
  INFO(b.output);
  REQUIRE(b.exit_code == 0);
  check_continues(loss1, column(dir.file("back"), "loss"), 10, 1e-5);
}

TEST_CASE("parallel: ZeRO-3 gathering bf16 under 3 pipeline stages matches 1 process", "[parallel][cli][slow]") {
  // A middle stage holds neither end: the stream it receives is the blocks' dtype (bf16 gathered),
  // not that of the final norm it leaves on the host in fp32.
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  const std::vector<std::string> model = {"model.tie_embeddings=false", "model.n_layer=3", "precision.mode=bf16"};
  auto r1 = train(dir.file("r.yaml"), dir.file("one"), 0, model);
  INFO(r1.output);
  REQUIRE(r1.exit_code == 0);
  std::vector<std::string> sets = model;
  sets.insert(sets.end(),
              {"parallel.zero=3", "parallel.pp=3", "train.per_device_batch_size=1", "train.grad_accum_steps=2"});
  // bf16 gathered weights: ZeRO-3's bf16 bound (5e-3, above).
  const auto r = train_like_one_process(dir, dir.file("r.yaml"), Variant{"dp2xpp3", sets, 6},
                                        column(dir.file("one"), "loss"), column(dir.file("one"), "grad_norm"), 5e-3);
  CHECK_THAT(r.output, Contains("gathered only while in use, in bf16") && Contains("pipeline: stage 0 of 3"));
}

TEST_CASE(
    "parallel: a ZeRO-3 rank killed while a checkpoint is written (also asynchronously) leaves the last one "
    "whole, and it resumes exactly",
    "[parallel][checkpoint][cli][slow]") {
  TempDir dir;
  std::vector<std::string> sets = {"train.per_device_batch_size=2", "parallel.zero=3", "train.max_steps=300",
                                   "checkpoint.every=20", "train.log_every=20"};
  // Rank 0 commits each checkpoint; rank 1 writes its rows into rank 0's temporary directory.
  SECTION("rank 0, synchronous saves") { check_kill_during_save(dir, sets, 0); }
  SECTION("rank 1, asynchronous saves") {
    sets.push_back("checkpoint.async=true");
    check_kill_during_save(dir, sets, 1);
  }
}

// Stage 0's weights, gradients and optimizer MiB from `gputrain plan`'s per-rank table.
std::vector<double> planned_rank_memory(const std::string& output) {
  const auto at = output.find("memory per rank between steps");
  REQUIRE(at != std::string::npos);
  const auto row = output.find("\n| 0 |", at);
  REQUIRE(row != std::string::npos);
  std::istringstream in(output.substr(row + 6));
  std::vector<double> v(3);
  char bar;
  in >> v[0] >> bar >> v[1] >> bar >> v[2];
  return v;
}

TEST_CASE("parallel: plan --world-size gives the memory each rank holds, as runs measure it", "[parallel][cli][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  const std::vector<std::pair<std::vector<std::string>, int>> cases = {
      {{"parallel.zero=0"}, 2},
      {{"parallel.zero=1"}, 2},
      {{"parallel.zero=2"}, 2},
      {{"parallel.zero=3"}, 2},
      {{"parallel.tp=2"}, 2},
      {{"parallel.zero=3", "parallel.tp=2"}, 4},
      {{"model.tie_embeddings=false", "parallel.zero=3", "parallel.pp=2"}, 4}};
  for (const auto& [sets, nproc] : cases) {
    std::vector<std::string> all = {"model.d_model=256", "train.per_device_batch_size=2", "train.max_steps=2"};
    all.insert(all.end(), sets.begin(), sets.end());
    INFO(sets.back());
    std::vector<std::string> args = {"plan", dir.file("r.yaml"), "--world-size", std::to_string(nproc)};
    for (const auto& s : all) args.insert(args.end(), {"--set", s});
    const auto plan = run_gputrain(args);
    INFO(plan.output);
    REQUIRE(plan.exit_code == 0);
    const auto planned = planned_rank_memory(plan.output);
    const std::string out = dir.file(sets.front() + sets.back());
    REQUIRE(train(dir.file("r.yaml"), out, nproc, all).exit_code == 0);
    const auto m = read_json(out + "/summary.json")["memory_per_rank"][0];
    // The table rounds to 0.1 MiB; the run's rows are padded to a multiple of the ranks.
    CHECK(m["weights_mb"].get<double>() == Approx(planned[0]).margin(0.1));
    CHECK(m["grads_mb"].get<double>() == Approx(planned[1]).margin(0.1));
    CHECK(m["optimizer_state_mb"].get<double>() == Approx(planned[2]).margin(0.1));
  }
  // parallel.offload_params: the same holdings, in host memory on a CUDA run.
  const auto offload = run_gputrain({"plan", dir.file("r.yaml"), "--world-size", "2", "--set", "parallel.zero=3",
                                     "--set", "parallel.offload_params=true"});
  INFO(offload.output);
  REQUIRE(offload.exit_code == 0);
  CHECK_THAT(offload.output, Contains("parallel.offload_params: on a CUDA run the weights, gradients and optimizer "
                                      "state above are in host memory"));
  // parallel.offload_optimizer nvme under bf16: the fp32 weights go to the state's file too.
  for (const char* mode : {"bf16", "fp32"}) {
    const auto nvme =
        run_gputrain({"plan", dir.file("r.yaml"), "--world-size", "2", "--set", "parallel.zero=3", "--set",
                      "parallel.offload_optimizer=nvme", "--set", std::string("precision.mode=") + mode});
    INFO(nvme.output);
    REQUIRE(nvme.exit_code == 0);
    CHECK_THAT(nvme.output, Contains("the optimizer state above is in a file of each rank"));
    CHECK((nvme.output.find("the fp32 weights above are in that file too") != std::string::npos) ==
          (std::string(mode) == "bf16"));
  }
}

TEST_CASE("parallel: batch size auto fits each rank's share under ZeRO-1 and 3, as plan --world-size says",
          "[parallel][cli]") {
  TempDir dir;
  // Weights and optimizer state outweigh one sequence's activations: ZeRO-3's halves leave room for more.
  write_file(dir.file("r.yaml"),
             "run: {name: dp, threads: 1, memory_budget_mb: 60}\n"
             "model: {vocab_size: 256, seq_len: 32, n_layer: 4, n_head: 4, d_model: 256, "
             "dropout: 0.0}\n"
             "data:\n  train: {format: text, path: " +
                 shared_data("tinyshakespeare.txt") +
                 ", span: [0.0, 0.01]}\n"
                 "train: {per_device_batch_size: auto, global_batch_size: 32, max_steps: 3, "
                 "log_every: 1}\n"
                 "metrics: {progress: off}\n");
  std::map<int, int> chosen;
  for (const int zero : {0, 1, 3}) {
    const std::string z = "parallel.zero=" + std::to_string(zero);
    const auto plan = run_gputrain({"plan", dir.file("r.yaml"), "--world-size", "2", "--set", z});
    INFO(plan.output);
    REQUIRE(plan.exit_code == 0);
    const auto r = train(dir.file("r.yaml"), dir.file(z), 2, {z});
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const auto s = read_json(dir.file(z) + "/summary.json");
    chosen[zero] = s["per_device_batch_size"].get<int>();
    CHECK(chosen[zero] * s["grad_accum_steps"].get<int>() == 16);  // each rank's half of the global batch
    CHECK_THAT(plan.output, Contains("micro-batch " + std::to_string(chosen[zero]) + " x seq_len 32"));
    if (zero > 0) CHECK_THAT(plan.output, Contains("one rank with micro-batch " + std::to_string(chosen[zero]) + " ("));
  }
  // ZeRO-1 halves the optimizer state (whole weights and gradients stay); ZeRO-3 halves everything.
  CHECK(chosen[0] == 2);
  CHECK(chosen[1] == 4);
  CHECK(chosen[3] == 8);
  // Other micro-batches, the same global batches: the same training.
  for (const char* z : {"parallel.zero=1", "parallel.zero=3"})
    CHECK(max_abs_diff(column(dir.file("parallel.zero=0"), "loss"), column(dir.file(z), "loss")) < 1e-5);
}

TEST_CASE("parallel: ZeRO-3 refuses what it is not combined with yet, naming the key and the fix", "[parallel][cli]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"parallel.zero=3", "parallel.gather_dtype=bf16"}, "needs bf16 autocast around it"},
      {{"parallel.zero=4"}, "parallel.zero"},
      // The offloads: each for its own stage.
      {{"parallel.zero=3", "parallel.offload_optimizer=true"}, "use parallel.offload_params: true"},
      {{"parallel.zero=3", "parallel.offload_optimizer=cpu"}, "or parallel.offload_optimizer: nvme"},
      {{"parallel.zero=2", "parallel.offload_params=true"}, "parallel.offload_params: offloads the weight shards"},
      {{"parallel.zero=2", "parallel.offload_optimizer=nvme"}, "nvme streams the optimizer state of parallel.zero: 3"},
  };
  for (const auto& [sets, message] : cases) {
    std::vector<std::string> args = {"validate", dir.file("r.yaml")};
    for (const auto& s : sets) args.insert(args.end(), {"--set", s});
    const auto r = run_gputrain(args);
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Contains(message));
    CHECK_THAT(r.output, Contains("fix:"));
  }
}
