// parallel.cp through the binary: 2 and 4 processes splitting each sequence give one process's
// per-step losses and gradient norms, also combined with dp, tp, pp and ZeRO-3, with rotary
// positions, grouped-query attention, recomputation and a sliding window, by either
// parallel.cp_method; a cp 2 checkpoint holds the one-process model and resumes with one process;
// `gputrain plan` shows the cp groups; and sequence lengths cp cannot cut are exit-2 errors naming
// the key.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <regex>
#include <tuple>

#include "parallel_runs.h"
#include "same_tensors.h"
#include "test_util.h"

using namespace gputrain::test;
using Catch::Contains;
namespace fs = std::filesystem;

TEST_CASE("context parallel: cp 2 and 4, and cp with dp, tp, pp and ZeRO-3, match 1 process", "[parallel][cli][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());  // GPT-2 (learned positions), seq_len 32
  REQUIRE(train(dir.file("r.yaml"), dir.file("one"), 0, {}).exit_code == 0);
  const auto loss1 = column(dir.file("one"), "loss");
  const auto norm1 = column(dir.file("one"), "grad_norm");
  const std::vector<Variant> variants = {
      {"cp2", {"parallel.cp=2"}, 2},
      {"cp4", {"parallel.cp=4"}, 4},
      {"dp2-cp2", {"parallel.cp=2", "train.per_device_batch_size=2"}, 4},
      {"tp2-cp2", {"parallel.cp=2", "parallel.tp=2"}, 4},
      {"pp2-cp2", {"parallel.cp=2", "parallel.pp=2", "train.per_device_batch_size=2", "train.grad_accum_steps=2"}, 4},
      {"zero3-cp2", {"parallel.cp=2", "parallel.zero=3"}, 2},
      {"zero2-dp2-cp2", {"parallel.cp=2", "parallel.zero=2", "train.per_device_batch_size=2"}, 4},
  };
  for (const auto& v : variants) {
    SECTION(v.name) {
      // Tolerance 1e-5 (kReorderedSums where tp's partial sums add in another order).
      const auto r = train_like_one_process(dir, dir.file("r.yaml"), v, loss1, norm1,
                                            std::string(v.name).find("tp") == 0 ? kReorderedSums : 1e-5);
      INFO(r.output);
      CHECK_THAT(r.output, Contains("context parallel: this rank holds chunks"));
      const auto s = read_json(dir.file(v.name) + "/summary.json");
      CHECK(s["grid"]["cp"] == (std::string(v.name) == "cp4" ? 4 : 2));
    }
  }
}

TEST_CASE(
    "context parallel: rotary positions, grouped-query attention and full or selective recomputation under cp 2, a "
    "sliding window under cp 4, and experts under ep 2 x cp 2 match 1 process",
    "[parallel][cli][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  // Llama: rotary positions, 4 query heads over 2 key/value heads. (Packed documents under cp:
  // document_attention_cli_test.cpp.)
  const std::vector<std::string> llama = {"model.arch=llama", "model.n_head=4", "model.n_kv_head=2"};
  REQUIRE(train(dir.file("r.yaml"), dir.file("one"), 0, llama).exit_code == 0);
  train_like_one_process(
      dir, dir.file("r.yaml"),
      Variant{"cp2-recompute", with(llama, {"parallel.cp=2", "train.gradient_checkpointing=full"}), 2},
      column(dir.file("one"), "loss"), column(dir.file("one"), "grad_norm"), 1e-5);
  train_like_one_process(
      dir, dir.file("r.yaml"),
      Variant{"cp2-selective", with(llama, {"parallel.cp=2", "train.gradient_checkpointing=selective"}), 2},
      column(dir.file("one"), "loss"), column(dir.file("one"), "grad_norm"), 1e-5);
  // Mistral's sliding window (8 of the 32 positions).
  const std::vector<std::string> mistral = {"model.arch=mistral", "model.n_head=4", "model.n_kv_head=2",
                                            "model.sliding_window=8"};
  REQUIRE(train(dir.file("r.yaml"), dir.file("one-window"), 0, mistral).exit_code == 0);
  train_like_one_process(dir, dir.file("r.yaml"), Variant{"cp4-window", with(mistral, {"parallel.cp=4"}), 4},
                         column(dir.file("one-window"), "loss"), column(dir.file("one-window"), "grad_norm"), 1e-5);
  // Experts split over ep 2 of dp 2, each sequence over cp 2 (no capacity limit and no balancing
  // loss: both depend on how the tokens are split over ranks).
  const std::vector<std::string> experts = {"model.moe.experts=4", "model.moe.top_k=2", "model.moe.capacity_factor=0",
                                            "model.moe.aux_loss_coef=0"};
  REQUIRE(train(dir.file("r.yaml"), dir.file("one-moe"), 0, experts).exit_code == 0);
  train_like_one_process(
      dir, dir.file("r.yaml"),
      Variant{"ep2-dp2-cp2", with(experts, {"parallel.cp=2", "parallel.ep=2", "train.per_device_batch_size=2"}), 4},
      column(dir.file("one-moe"), "loss"), column(dir.file("one-moe"), "grad_norm"), 1e-5);
}

TEST_CASE(
    "context parallel: the ring method matches 1 process under cp 2 and 4, with dp, tp, pp and ZeRO-3, with "
    "rotary recomputation, a sliding window, bf16, fp16 and LoRA",
    "[parallel][cli][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  REQUIRE(train(dir.file("r.yaml"), dir.file("one"), 0, {}).exit_code == 0);
  const std::vector<std::string> ring = {"parallel.cp_method=ring", "parallel.cp=2"};
  const std::vector<Variant> variants = {
      {"cp2", ring, 2},
      {"cp4", {"parallel.cp_method=ring", "parallel.cp=4"}, 4},
      {"dp2-cp2", with(ring, {"train.per_device_batch_size=2"}), 4},
      {"tp2-cp2", with(ring, {"parallel.tp=2"}), 4},
      {"pp2-cp2", with(ring, {"parallel.pp=2", "train.per_device_batch_size=2", "train.grad_accum_steps=2"}), 4},
      {"zero3-cp2", with(ring, {"parallel.zero=3"}), 2},
  };
  for (const auto& v : variants) {
    CAPTURE(v.name);
    const auto r = train_like_one_process(dir, dir.file("r.yaml"), v, column(dir.file("one"), "loss"),
                                          column(dir.file("one"), "grad_norm"),
                                          std::string(v.name).find("tp") == 0 ? kReorderedSums : 1e-5);
    CHECK_THAT(r.output, Contains("attention passes keys and values round the ring"));
  }
  // Each against its own one-process run: rotary positions over grouped-query heads, recomputed;
  // Mistral's window (blocks wholly outside it are skipped); autocast (merged in float32); LoRA.
  const std::vector<std::string> llama = {"model.arch=llama", "model.n_head=4", "model.n_kv_head=2"};
  const std::vector<std::string> mistral = {"model.arch=mistral", "model.n_head=4", "model.n_kv_head=2",
                                            "model.sliding_window=8"};
  const std::vector<std::tuple<const char*, std::vector<std::string>, std::vector<std::string>, int, double>> own = {
      {"llama-recompute", llama, with(ring, {"train.gradient_checkpointing=full"}), 2, 1e-5},
      {"mistral-window", mistral, {"parallel.cp_method=ring", "parallel.cp=4"}, 4, 1e-5},
      // Measured (2026-12-01) in loss / gradient norm: bf16 2.4e-4 / 1.1e-3, fp16 8.1e-5 / 1.3e-4; held to ~10x.
      {"bf16", {"precision.mode=bf16"}, ring, 2, 1e-2},
      {"fp16", {"precision.mode=fp16"}, ring, 2, 1.5e-3},
      {"lora", {"model.lora.rank=4", "model.lora.alpha=8"}, ring, 2, 1e-5}};
  for (const auto& [name, model, sets, nproc, tolerance] : own) {
    CAPTURE(name);
    const std::string one = dir.file(std::string("one-") + name);
    REQUIRE(train(dir.file("r.yaml"), one, 0, model).exit_code == 0);
    train_like_one_process(dir, dir.file("r.yaml"), Variant{name, with(model, sets), nproc}, column(one, "loss"),
                           column(one, "grad_norm"), tolerance);
  }
}

TEST_CASE(
    "context parallel: a cp 2 checkpoint holds the one-process model and resumes exactly and with 1 process, "
    "and a 1-process checkpoint resumes under cp 2",
    "[parallel][cli][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  const std::vector<std::string> sets = {"checkpoint.every=10"};
  REQUIRE(train(dir.file("r.yaml"), dir.file("one"), 0, sets).exit_code == 0);
  const std::vector<std::string> cp2 = with(sets, {"parallel.cp=2"});
  auto r = train(dir.file("r.yaml"), dir.file("cp2"), 2, cp2);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const fs::path ckpt = fs::path(dir.file("cp2")) / "checkpoints/step_00000010";
  check_same_model(fs::path(dir.file("one")) / "checkpoints/step_00000010", ckpt, 1e-5);

  const auto straight = column(dir.file("cp2"), "loss");
  train_resumed(dir.file("r.yaml"), dir.file("same"), 2, with_resume(cp2, ckpt.string()), straight, 10, 0);
  train_resumed(dir.file("r.yaml"), dir.file("single"), 0, with_resume(sets, ckpt.string()), straight, 10, 1e-5);
  // And the other way: the one-process checkpoint resumed under cp 2.
  const std::string one_ckpt = dir.file("one") + "/checkpoints/step_00000010";
  train_resumed(dir.file("r.yaml"), dir.file("split"), 2, with_resume(cp2, one_ckpt), column(dir.file("one"), "loss"),
                10, 1e-5);
}

TEST_CASE("context parallel: plan shows the cp groups and each rank's activations, and refuses lengths cp cannot cut",
          "[parallel][cli]") {
  auto r = run_gputrain(
      {"plan", "--world-size", "8", "--set", "parallel.cp=2", "--set", "parallel.tp=2", "--set", "model.seq_len=1024"});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("parallel grid: dp 2 x pp 1 x cp 2 x tp 2 = 8 processes"));
  CHECK_THAT(r.output, Contains("| 0 | 1 | 0 | 2, 6 |"));  // stage 0, cp place 1, tp shard 0: ranks 2 and 6
  CHECK_THAT(r.output, Contains("cp groups (one per dp replica, stage and tp shard): [0, 2] [1, 3] [4, 6] [5, 7]"));
  CHECK_THAT(r.output,
             Contains("place 0: chunks 0 and 3 (tokens 0-255 and 768-1023); place 1: chunks 1 and 2 (tokens 256-511 "
                      "and 512-767)"));
  CHECK_THAT(r.output, Contains("activations per rank under cp 2:"));

  // The ring keeps no gathered keys and values and no [T / cp, T] mask: less at 8192 tokens.
  auto activations = [](const std::vector<std::string>& method) {
    std::vector<std::string> args = {"plan",  "--world-size",      "2", "--set", "parallel.cp=2",
                                     "--set", "model.seq_len=8192"};
    args.insert(args.end(), method.begin(), method.end());
    const auto p = run_gputrain(args);
    INFO(p.output);
    REQUIRE(p.exit_code == 0);
    CHECK_THAT(p.output, Contains(method.empty() ? "the attention mask" : "one ring step's working space"));
    const std::string key = "activations per rank under cp 2: ";
    const size_t at = p.output.find(key);
    REQUIRE(at != std::string::npos);
    return std::stod(p.output.substr(at + key.size()));
  };
  const double gathering = activations({}), ring = activations({"--set", "parallel.cp_method=ring"});
  CAPTURE(gathering, ring);
  CHECK(ring < gathering);
  auto odd = run_gputrain({"plan", "--set", "parallel.cp=3", "--set", "model.seq_len=64"});
  CHECK(odd.exit_code == 2);
  CHECK_THAT(odd.output, Contains("parallel.cp: (3) needs model.seq_len (64) to divide into 2 x 3 equal chunks"));
  CHECK_THAT(odd.output, Contains("use one of 1, 2, 4, 8, 16, 32"));
  auto dropout = run_gputrain(
      {"plan", "--set", "parallel.cp=2", "--set", "parallel.cp_method=ring", "--set", "model.dropout=0.1"});
  CHECK(dropout.exit_code == 2);
  CHECK_THAT(dropout.output, Contains("parallel.cp_method: ring cannot drop attention weights"));
  CHECK_THAT(dropout.output, Contains("set model.dropout: 0, or parallel.cp_method: allgather"));
  auto world = run_gputrain({"plan", "--world-size", "6", "--set", "parallel.cp=4"});
  CHECK(world.exit_code == 2);
  CHECK_THAT(world.output,
             Contains("parallel.tp (1) x pp (1) x cp (4) = 4 does not divide the number of processes (6)"));
}

TEST_CASE("context parallel: every precision mode and LoRA under cp 2 follow 1 process", "[parallel][cli][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  // Low precision: the gathered keys and values travel in the compute dtype, and the two ranks' partial
  // sums meet in another order, so the runs agree to that dtype's rounding over 20 steps. Measured
  // (2026-12-01) in loss / gradient norm: bf16 4.7e-4 / 6.0e-4, fp16 3.3e-5 / 9.0e-5, bf16-pure
  // 3.6e-4 / 1.2e-3 (fp32, tf32: 1e-6, the metrics' resolution); held to ~10x.
  const std::vector<std::pair<const char*, double>> modes = {
      {"fp32", 1e-5}, {"tf32", 1e-5}, {"bf16", 6e-3}, {"fp16", 1e-3}, {"bf16-pure", 1.5e-2}};
  for (const auto& [mode, tolerance] : modes) {
    SECTION(mode) {
      const std::vector<std::string> sets = {std::string("precision.mode=") + mode};
      REQUIRE(train(dir.file("r.yaml"), dir.file("one"), 0, sets).exit_code == 0);
      train_like_one_process(dir, dir.file("r.yaml"), Variant{"cp2", with(sets, {"parallel.cp=2"}), 2},
                             column(dir.file("one"), "loss"), column(dir.file("one"), "grad_norm"), tolerance);
    }
  }
  SECTION("lora") {
    const std::vector<std::string> lora = {"model.lora.rank=4", "model.lora.alpha=8"};
    REQUIRE(train(dir.file("r.yaml"), dir.file("one"), 0, lora).exit_code == 0);
    const auto r = train_like_one_process(dir, dir.file("r.yaml"), Variant{"cp2", with(lora, {"parallel.cp=2"}), 2},
                                          column(dir.file("one"), "loss"), column(dir.file("one"), "grad_norm"), 1e-5);
    CHECK_THAT(r.output, Contains("LoRA"));
  }
}

TEST_CASE(
    "context parallel: evaluation under cp 2 (eval batches, the whole eval set, through a pipeline, under "
    "ZeRO-3, by the ring) gives 1 process's eval loss",
    "[parallel][cli][slow]") {
  TempDir dir;
  std::string recipe = dp_recipe();
  recipe.insert(recipe.find("train: {per_device_batch_size"),  // data.eval, before the train section
                "  eval: {format: text, path: " + shared_data("tinyshakespeare.txt") + ", span: [0.5, 0.505]}\n");
  write_file(dir.file("r.yaml"), recipe);
  auto eval_losses = [](const std::string& out) {
    std::vector<double> v;
    for (const auto& line : read_jsonl(out + "/metrics.jsonl"))
      if (line.contains("eval_loss")) v.push_back(line["eval_loss"].get<double>());
    return v;
  };
  const std::vector<std::string> eval = {"train.eval_every=10", "train.eval_steps=3"};
  for (const bool full : {false, true}) {
    CAPTURE(full);
    const std::vector<std::string> sets = with(eval, {full ? "train.eval_full=true" : "train.eval_full=false"});
    const std::string suffix = full ? "-full" : "";
    REQUIRE(train(dir.file("r.yaml"), dir.file("one" + suffix), 0, sets).exit_code == 0);
    const auto eval1 = eval_losses(dir.file("one" + suffix));
    REQUIRE(eval1.size() == 2);  // steps 10 and 20
    std::vector<Variant> variants = {{"cp2", with(sets, {"parallel.cp=2"}), 2},
                                     {"pp2-cp2", with(sets, {"parallel.cp=2", "parallel.pp=2"}), 4},
                                     {"zero3-cp2", with(sets, {"parallel.cp=2", "parallel.zero=3"}), 2},
                                     {"ring-cp2", with(sets, {"parallel.cp=2", "parallel.cp_method=ring"}), 2}};
    // The whole eval set is the same for any batch split (eval batches are per_device_batch_size
    // sequences each): there, dp 2 too, whose replicas each read half the windows.
    if (full)
      variants.push_back(
          {"zero3-dp2-cp2", with(sets, {"parallel.cp=2", "parallel.zero=3", "train.per_device_batch_size=2"}), 4});
    for (const auto& v : variants) {
      CAPTURE(v.name);
      const std::string out = dir.file(v.name + suffix);
      const auto r = train(dir.file("r.yaml"), out, v.nproc, v.sets);
      INFO(r.output);
      REQUIRE(r.exit_code == 0);
      const auto got = eval_losses(out);
      REQUIRE(got.size() == eval1.size());
      for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(eval1[i]).epsilon(1e-5));
    }
  }
}

TEST_CASE(
    "context parallel: the plan's activations per rank track each rank's measured peak within a stated band, for "
    "cp 1, 2 and 4 by both methods",
    "[parallel][cli][slow][memory]") {
  TempDir dir;
  // Llama 4 x 256 (8 heads over 2 key/value heads), vocab 4096, one 8192-token sequence: activations and
  // logits are most of each rank's training peak, and the ring's tile rule acts (4096 tokens at cp 2).
  write_file(
      dir.file("r.yaml"),
      "run: {name: cp-memory, threads: 1}\n"
      "model: {arch: llama, vocab_size: 4096, seq_len: 8192, n_layer: 4, n_head: 8, n_kv_head: 2, d_model: 256}\n"
      "data: {train: {format: synthetic, synthetic: {kind: uniform}}}\n"
      "train: {per_device_batch_size: 1, max_steps: 1}\n"
      "optim: {lr: 1e-3, schedule: {warmup_steps: 0}}\n"
      "metrics: {progress: off}\n");
  // The plan's activations and logits for one rank (MiB).
  auto planned = [&](const std::vector<std::string>& sets, int world) {
    std::vector<std::string> args = {"plan", dir.file("r.yaml"), "--world-size", std::to_string(world)};
    for (const auto& s : sets) args.insert(args.end(), {"--set", s});
    const auto p = run_gputrain(args);
    INFO(p.output);
    REQUIRE(p.exit_code == 0);
    std::smatch a, l;
    REQUIRE(std::regex_search(p.output, a, std::regex(R"(\| activations \| ([0-9.]+) \|)")));
    REQUIRE(std::regex_search(p.output, l, std::regex(R"(\| logits and loss \| ([0-9.]+) \|)")));
    return std::stod(a[1]) + std::stod(l[1]);
  };
  const std::vector<std::tuple<const char*, int, const char*>> layouts = {{"cp1", 1, ""},
                                                                          {"cp2-allgather", 2, "allgather"},
                                                                          {"cp2-ring", 2, "ring"},
                                                                          {"cp4-allgather", 4, "allgather"},
                                                                          {"cp4-ring", 4, "ring"}};
  for (const auto& [name, cp, method] : layouts) {
    CAPTURE(name);
    std::vector<std::string> sets = {"parallel.cp=" + std::to_string(cp)};
    if (*method) sets.push_back(std::string("parallel.cp_method=") + method);
    // What the sequence adds: each rank's training peak over the same layout's at 256 tokens (weights,
    // gradients, AdamW state, LibTorch and Gloo alike), against the plan's difference.
    const std::vector<std::string> small = with(sets, {"model.seq_len=256"});
    const auto big_peaks = training_peak_mb(dir, name, cp, sets),
               small_peaks = training_peak_mb(dir, std::string(name) + "-256", cp, small);
    const double measured = *std::max_element(big_peaks.begin(), big_peaks.end()) -
                            *std::max_element(small_peaks.begin(), small_peaks.end());
    const double plan = planned(sets, cp) - planned(small, cp);
    std::cout << name << ": the largest rank's peak rose " << measured << " MiB with the sequence; the plan: " << plan
              << " MiB (measured / plan " << measured / plan << ")" << std::endl;
    // Measured / plan (2026-12-01): cp1 0.83, cp2 all-gather 1.29, ring 0.75, cp4 all-gather 1.23, ring
    // 0.68 (the plan counts the CPU's gathering attention short and the ring's working space as its
    // upper bound). A plan that stopped dividing by cp read 0.18-0.65 at cp 2 and 4, and failed.
    CHECK(measured > 0.55 * plan);
    CHECK(measured < 1.5 * plan);
  }
}
