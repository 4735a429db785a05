// QLoRA through the CLI (docs/qlora.md): adapters train on a 4-bit base; 2 processes (dp, ZeRO-2,
// ZeRO-3, pipeline, context parallelism) give 1 process's losses; ZeRO-3 ranks hold a quarter of the
// base each, measured from outside; a resumed run continues the uninterrupted
// one exactly and refuses another quantization. Against transformers + bitsandbytes from PyPI: a
// 4-bit Llama gives their logits, and a run's PEFT adapters put on their 4-bit base give ours; a 4-bit
// folder transformers saved is read as stored (its logits, its eval loss, adapters for it).
#include <catch2/catch.hpp>

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <regex>
#include <sstream>

#include "checkpoint/inference_model.h"
#include "checkpoint/model_files.h"
#include "checkpoint/module_weights.h"
#include "checkpoint/safetensors.h"
#include "config/recipe.h"
#include "export_reference.h"
#include "model/linear.h"
#include "model/quantized_weight.h"
#include "objective/objectives.h"
#include "optim/optimizer_specs.h"
#include "parallel_runs.h"
#include "test_util.h"
#include "util/text_file.h"

using namespace gputrain;
using namespace gputrain::test;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

// The shared 1-vs-N recipe, as a QLoRA run: every block Linear in NF4 under rank-4 adapters.
const std::vector<std::string> kQlora = {
    "model.lora.rank=4",       "model.lora.alpha=8", "model.lora.targets=[qkv, proj, mlp_up, mlp_down]",
    "model.quantize.base=nf4", "optim.lr=1e-2",      "checkpoint.every=10"};

}  // namespace

TEST_CASE("qlora: adapters on a 4-bit base: 2 processes match 1, a resume continues it exactly", "[qlora][cli][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  const CommandResult one = train(dir.file("r.yaml"), dir.file("one"), 0, kQlora);
  INFO(one.output);
  REQUIRE(one.exit_code == 0);
  CHECK_THAT(one.output, Contains("in 4 bits (model.quantize)"));
  const auto loss1 = column(dir.file("one"), "loss");
  const auto norm1 = column(dir.file("one"), "grad_norm");
  REQUIRE(loss1.size() == 20);
  CHECK(loss1.back() < loss1.front() - 0.05);  // the adapters learn (slowly on this random base)

  // Close to the same run on the fp32 base, and not it: the base really is 4-bit.
  REQUIRE(train(dir.file("r.yaml"), dir.file("plain"), 0, with(kQlora, {"model.quantize.base=none"})).exit_code == 0);
  const auto plain = column(dir.file("plain"), "loss");
  CHECK(max_abs_diff(plain, loss1) < 0.05);
  CHECK(std::abs(plain[0] - loss1[0]) > 1e-4);

  // Tolerance 1e-5: the same sums in another order. Each rank quantizes the tensors it holds alone.
  const std::vector<Variant> variants = {
      {"dp2", with(kQlora, {"train.per_device_batch_size=2"})},
      {"zero2", with(kQlora, {"train.per_device_batch_size=2", "parallel.zero=2", "parallel.bucket_mb=0.01"})},
      {"pp2", with(kQlora, {"parallel.pp=2", "parallel.pp_microbatches=2"})},
      {"cp2", with(kQlora, {"parallel.cp=2"})},
      {"recompute", with(kQlora, {"train.gradient_checkpointing=full"}), 1},
      // ZeRO-3 shards the 4-bit base by whole blocks (parallel/sharded_4bit_base.h); each unit's
      // codes and statistics are gathered for its forward and again for its (recomputed) backward.
      {"zero3", with(kQlora, {"train.per_device_batch_size=2", "parallel.zero=3"})},
      {"zero3-recompute",
       with(kQlora, {"train.per_device_batch_size=2", "parallel.zero=3", "train.gradient_checkpointing=full"})},
  };
  for (const auto& v : variants) {
    SECTION(v.name) {
      const CommandResult r = train_like_one_process(dir, dir.file("r.yaml"), v, loss1, norm1, 1e-5);
      INFO(r.output);
    }
  }
  SECTION("resume") {
    const std::string step10 = dir.file("one") + "/checkpoints/step_00000010";
    // Adapters only, and the base's fingerprint names its quantization.
    CHECK_THAT(read_json(step10 + "/trainer.json")["lora_base"].get<std::string>(),
               Contains(" nf4 block 64 double_quant"));
    train_resumed(dir.file("r.yaml"), dir.file("resumed"), 0, with_resume(kQlora, step10), loss1, 10, 0);
    // Under ZeRO-3 too, from the 1-process checkpoint (adapters alone: the base quantized again, sharded).
    train_resumed(dir.file("r.yaml"), dir.file("resumed-zero3"), 2,
                  with_resume(with(kQlora, {"train.per_device_batch_size=2", "parallel.zero=3"}), step10), loss1, 10,
                  1e-5);
    // Another quantization is another base: refused, naming the key.
    const CommandResult fp4 =
        train(dir.file("r.yaml"), dir.file("fp4"), 0, with(with_resume(kQlora, step10), {"model.quantize.base=fp4"}));
    CHECK(fp4.exit_code == 2);
    CHECK_THAT(fp4.output, Contains("model.quantize.base"));
  }
}

TEST_CASE("qlora: under ZeRO-3 each of 4 ranks holds a quarter of the 4-bit base, measured by the kernel",
          "[qlora][cli][memory][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  // 101M parameters in 8 blocks 1024 wide (0.4 GB in fp32, 52 MiB in NF4), bf16 products: each
  // rank's 4-bit base is its only large holding, the dequantized Linear in use (8 MiB) is small beside it.
  const std::vector<std::string> big =
      with(kQlora, {"model.n_layer=8", "model.d_model=1024", "model.n_head=8", "train.max_steps=2",
                    "train.per_device_batch_size=1", "precision.mode=bf16", "checkpoint.every=0"});
  std::vector<std::string> tiny = with(big, {"model.n_layer=1", "model.d_model=16", "model.n_head=2"});
  // Each peak over the process's life (building included), ZeRO-2's and ZeRO-3's alike.
  std::vector<double> built2, built3, built_tiny;
  const auto zero2 = training_peak_mb(dir, "zero2", 4, with(big, {"parallel.zero=2"}), &built2);
  const auto zero3 = training_peak_mb(dir, "zero3", 4, with(big, {"parallel.zero=3"}), &built3);
  training_peak_mb(dir, "zero3-tiny", 4, with(tiny, {"parallel.zero=3"}), &built_tiny);
  // The 4-bit base as ZeRO-2's ranks hold it (whole) and ZeRO-3's (a quarter), as the runs log it.
  auto logged_mb = [&](const std::string& run) {
    const std::string log = read_file(dir.file(run + ".log"));
    std::smatch m;
    REQUIRE(std::regex_search(log, m, std::regex(R"(in 4 bits \(model.quantize\): ([0-9.]+) MiB on this rank)")));
    return std::stod(m[1]);
  };
  const double base = logged_mb("zero2");
  std::cout << "4-bit base: " << base << " MiB whole, " << logged_mb("zero3") << " MiB a ZeRO-3 rank" << std::endl;
  CHECK(base > 47);
  CHECK(logged_mb("zero3") < 0.27 * base);
  const double fp32_model = 8.0 * 12 * 1024 * 1024 * 4 / 1048576;  // the block Linears alone
  const double built_base = *std::max_element(built_tiny.begin(), built_tiny.end());
  for (size_t r = 0; r < zero3.size(); ++r) {
    // ZeRO-3 keeps 3/4 of the base fewer and gathers a block (1/8): measured 0.62-0.64 of the base less
    // (2026-12-08; 0.75-0.77 with 16 blocks, twice the time); the base held whole, it would be none.
    std::cout << "rank " << r << ": ZeRO-2 peak " << zero2[r] << " MiB, ZeRO-3 " << zero3[r] << " MiB ("
              << (zero2[r] - zero3[r]) / base << " of the 4-bit base less); until its first step "
              << (built3[r] - built_base) / fp32_model << " of the fp32 model" << std::endl;
    CHECK(zero2[r] - zero3[r] > 0.45 * base);
    // Building it no rank held more than its blocks and the rows of one band it quantizes (measured
    // 0.081-0.084 of the fp32 model).
    CHECK(built3[r] - built_base < 0.1 * fp32_model);
  }
}

TEST_CASE("qlora: under tensor parallelism each rank quantizes its slices: tp 2 and dp 2 x tp 2 match 1 process",
          "[qlora][cli][slow]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  // 64 wide in blocks of 32: the row-parallel projections' halves (32 columns) are whole blocks.
  const std::vector<std::string> sets = with(kQlora, {"model.d_model=64", "model.quantize.block_size=32"});
  REQUIRE(train(dir.file("r.yaml"), dir.file("one"), 0, sets).exit_code == 0);
  const auto loss1 = column(dir.file("one"), "loss");
  const auto norm1 = column(dir.file("one"), "grad_norm");
  // kReorderedSums, as tensor parallelism's other tests: its sums run in another order.
  const std::vector<Variant> variants = {
      {"tp2", with(sets, {"parallel.tp=2"}), 2},
      {"dp2-tp2", with(sets, {"parallel.tp=2", "train.per_device_batch_size=2"}), 4},
  };
  for (const auto& v : variants) {
    SECTION(v.name) {
      const CommandResult r = train_like_one_process(dir, dir.file("r.yaml"), v, loss1, norm1, kReorderedSums);
      INFO(r.output);
      CHECK_THAT(r.output, Contains("in 4 bits (model.quantize)"));
    }
  }
  SECTION("a slice that would cut a block") {
    const CommandResult r =
        train(dir.file("r.yaml"), dir.file("cut"), 2, with(sets, {"parallel.tp=2", "model.quantize.block_size=64"}));
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Contains("model.quantize.block_size") && Contains("fix:"));
  }
}

TEST_CASE("qlora: recipes that would train or shard a 4-bit weight are refused, naming the key and the fix",
          "[qlora][cli]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  const auto refused = [&](const std::vector<std::string>& sets, const std::string& key) {
    std::vector<std::string> args = {"validate", dir.file("r.yaml")};
    for (const auto& s : sets) args.insert(args.end(), {"--set", s});
    const CommandResult r = run_gputrain(args);
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Contains(key) && Contains("fix:"));
  };
  refused({"model.quantize.base=nf4"}, "model.lora.rank");  // every weight would train
  refused({"model.quantize.base=nf4", "model.lora.rank=4", "model.quantize.block_size=48"},
          "model.quantize.block_size");
  refused({"model.quantize.base=nf4", "model.lora.rank=4", "model.lora.save=full"}, "model.lora.save");
  refused({"model.quantize.base=int3", "model.lora.rank=4"}, "model.quantize.base");
  refused({"model.quantize.base=nf4", "model.lora.rank=4", "parallel.tp=2", "parallel.zero=3"}, "parallel.zero");
}

namespace {

// A small bf16 Llama saved by transformers in dir/base, and random tokens for it in dir/tokens.safetensors
// (its logits in dir/bf16.safetensors); bitsandbytes' CPU matmul needs rows of whole blocks: widths of
// 128 and 256.
torch::Tensor save_small_llama(const TempDir& dir) {
  const nlohmann::json config = {
      {"vocab_size", 300},        {"hidden_size", 128},       {"intermediate_size", 256},      {"num_hidden_layers", 2},
      {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"max_position_embeddings", 64}, {"rms_norm_eps", 1e-5},
      {"rope_theta", 10000.0}};
  const torch::Tensor tokens = at::randint(0, 300, {2, 32}, at::kLong);
  write_safetensors(dir.file("tokens.safetensors"), {{"tokens", tokens}});
  const nlohmann::json spec = {{"class", "LlamaForCausalLM"}, {"config", config}, {"dtype", "bfloat16"}};
  hf_interop({"save", dir.file("base"), dir.file("tokens.safetensors"), dir.file("bf16.safetensors"), spec.dump()});
  return tokens;
}

// A 3-step QLoRA recipe on model.init_from `base` (plus `extra` model keys), checkpointing at its end.
std::string small_qlora_recipe(const std::string& base, const std::string& extra) {
  return "model:\n  init_from: " + base + "\n  seq_len: 32\n" +
         "  lora: {rank: 4, alpha: 8, targets: [qkv, proj, mlp_up, mlp_down]}\n" + extra +
         "data:\n  train: {format: synthetic, synthetic: {vocab: 300}}\n"
         "train: {max_steps: 3, per_device_batch_size: 2, log_every: 1, eval_every: 0}\n"
         "optim: {lr: 0.02, schedule: {warmup_steps: 0}}\n"
         "checkpoint: {every: 3}\nrun: {threads: 2}\nmetrics: {progress: off}\n";
}

// The logits of the model a run's last checkpoint holds, its adapters merged into its base.
torch::Tensor merged_logits(const std::string& run, const Settings& s, const torch::Tensor& tokens) {
  const fs::path checkpoint = find_checkpoint(run);
  ModelSettings plain = s.model;
  plain.lora.rank = 0;
  plain.quantize.base = QuantBase::kNone;
  Gpt merged(plain);
  load_module_weights(*merged, checkpoint_plain_weights(checkpoint, s), checkpoint.string(), "");
  return logits_of(merged, tokens);
}

}  // namespace

TEST_CASE("qlora: a 4-bit Llama gives transformers + bitsandbytes' logits, and its PEFT adapters load onto that base",
          "[qlora][hf][python][slow]") {
  TempDir dir;
  const torch::Tensor tokens = save_small_llama(dir);
  write_file(dir.file("r.yaml"), small_qlora_recipe("base", "  quantize: {base: nf4}\n"));
  const Settings s = load_recipe(dir.file("r.yaml"), {}, recipe_rules()).settings;

  // The base alone: quantized here per Hugging Face tensor, there by bitsandbytes as it loads.
  CHECK_THAT(
      hf_interop({"bnb4", dir.file("base"), dir.file("tokens.safetensors"), dir.file("bnb4.safetensors"), "nf4", "1"}),
      Contains("Linear4bit"));
  Gpt model = build_initial_model(s, torch::kCPU, torch::kFloat);
  quantize_whole_model(*model);
  const torch::Tensor ours = logits_of(model, tokens);
  const torch::Tensor theirs = *read_safetensors(dir.file("bnb4.safetensors")).find("logits");
  const torch::Tensor unquantized = *read_safetensors(dir.file("bf16.safetensors")).find("logits");
  REQUIRE(theirs.sizes() == ours.sizes());
  // fp32 products of the same 4-bit values: the sums' order only. 4 bits moved the logits 100x that.
  const double gap = (theirs - ours).abs().max().item<double>();
  CHECK(gap < 1e-4);
  CHECK((unquantized - ours).abs().max().item<double>() > 100 * std::max(gap, 1e-6));

  // The same through --quantize (generate and eval load so): the model's logits, and a loss of its own.
  InferenceModel loaded = load_inference_model(dir.file("base"), torch::kCPU, QuantBase::kNf4);
  CHECK(at::equal(logits_of(loaded.model, tokens), ours));
  write_file(dir.file("text.txt"), "To be, or not to be, that is the question: whether 'tis nobler in the mind.\n");
  const auto eval_loss = [&](const std::string& quantize) {
    const CommandResult r =
        run_gputrain({"eval", dir.file("base"), "--data", dir.file("text.txt"), "--tokenizer", "bytes", "--device",
                      "cpu", "--quantize", quantize, "--out", dir.file("eval.json")});
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    return read_json(dir.file("eval.json"))["loss"].get<double>();
  };
  CHECK(std::abs(eval_loss("nf4") - eval_loss("none")) > 1e-4);
  const CommandResult bad = run_gputrain({"eval", dir.file("base"), "--quantize", "int3"});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.output, Contains("--quantize"));

  // A QLoRA run's adapters, exported for PEFT, on transformers' 4-bit base: our merged model's logits.
  const CommandResult run = run_recipe(dir.file("r.yaml"), dir.file("run"));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  const CommandResult exp = run_gputrain({"export", dir.file("run"), "--out", dir.file("adapter"), "--format", "peft"});
  INFO(exp.output);
  REQUIRE(exp.exit_code == 0);
  CHECK_THAT(hf_interop({"peft", dir.file("base"), dir.file("tokens.safetensors"), dir.file("peft.safetensors"),
                         dir.file("adapter"), "nf4"}),
             Contains("adapted modules: 14"));
  const torch::Tensor peft = *read_safetensors(dir.file("peft.safetensors")).find("logits");
  const torch::Tensor adapted = merged_logits(dir.file("run"), s, tokens);
  CHECK((peft - adapted).abs().max().item<double>() < 1e-4);
  CHECK((adapted - ours).abs().max().item<double>() > 1e-3);  // the adapters changed the model
}

TEST_CASE("qlora: a published bitsandbytes 4-bit folder is read as stored: transformers' logits, and adapters for it",
          "[qlora][hf][python][slow]") {
  TempDir dir;
  const torch::Tensor tokens = save_small_llama(dir);
  // transformers quantizes the bf16 base as it loads and save_pretrained writes the 4-bit folder, sharded.
  CHECK_THAT(hf_interop({"save4bit", dir.file("base"), dir.file("tokens.safetensors"), dir.file("q4.safetensors"),
                         "nf4", "1", dir.file("q4")}),
             Contains("Linear4bit"));
  const torch::Tensor theirs = *read_safetensors(dir.file("q4.safetensors")).find("logits");

  // eval and generate's model: the folder's own codes (not quantized again), transformers' logits.
  InferenceModel loaded = load_inference_model(dir.file("q4"), torch::kCPU, QuantBase::kNone);
  CHECK(loaded.settings.model.quantize.base == QuantBase::kNf4);
  CHECK((logits_of(loaded.model, tokens) - theirs).abs().max().item<double>() < 1e-4);
  std::shared_ptr<const QuantizedWeight> q_proj;
  for (const auto& item : loaded.model->named_modules())
    if (item.key() == "transformer.h.1.attn.c_attn") q_proj = item.value()->as<Linear>()->quantized;
  REQUIRE(q_proj);
  torch::Tensor stored;
  for (const auto& f : fs::directory_iterator(dir.file("q4")))
    if (f.path().extension() == ".safetensors") {
      const SafetensorsFile shard = read_safetensors(f.path().string());
      if (const torch::Tensor* t = shard.find("model.layers.1.self_attn.q_proj.weight")) stored = *t;
    }
  REQUIRE(stored.defined());
  CHECK(at::equal(q_proj->pieces.front().codes, stored));
  // gputrain eval's loss over every window of a text equals transformers' on that folder (fp32 sums).
  write_file(dir.file("text.txt"), read_text_file(shared_data("tinyshakespeare.txt")).substr(0, 3000));
  const CommandResult eval = run_gputrain({"eval", dir.file("q4"), "--data", dir.file("text.txt"), "--tokenizer",
                                           "bytes", "--device", "cpu", "--out", dir.file("eval.json")});
  INFO(eval.output);
  REQUIRE(eval.exit_code == 0);
  hf_interop({"textloss", dir.file("q4"), dir.file("text.txt"), dir.file("ref.json"), "64"});
  const nlohmann::json ours = read_json(dir.file("eval.json")), expected = read_json(dir.file("ref.json"));
  CHECK(ours["windows"] == expected["windows"]);
  CHECK(ours["loss"].get<double>() == Approx(expected["loss"].get<double>()).epsilon(1e-5));
  // In bf16 compute (eval --precision bf16; transformers with the model in bf16 and
  // bnb_4bit_compute_dtype=bfloat16): equal within bf16's noise. Our residual stream and norms stay
  // fp32 under autocast where transformers' are bf16; measured 2026-12-04 in docs/benchmarks.md.
  const CommandResult eval16 =
      run_gputrain({"eval", dir.file("q4"), "--data", dir.file("text.txt"), "--tokenizer", "bytes", "--device", "cpu",
                    "--precision", "bf16", "--out", dir.file("eval16.json")});
  INFO(eval16.output);
  REQUIRE(eval16.exit_code == 0);
  hf_interop({"textloss", dir.file("q4"), dir.file("text.txt"), dir.file("ref16.json"), "64", "bfloat16"});
  const double ours16 = read_json(dir.file("eval16.json"))["loss"].get<double>(),
               theirs16 = read_json(dir.file("ref16.json"))["loss"].get<double>(), ours32 = ours["loss"].get<double>();
  std::cout << "eval loss in bf16 compute: gputrain " << ours16 << ", transformers + bitsandbytes " << theirs16
            << " (relative " << std::abs(ours16 - theirs16) / theirs16 << "); fp32 " << ours32 << std::endl;
  CHECK(read_json(dir.file("eval16.json"))["precision"] == "bf16");
  CHECK(std::abs(ours16 - theirs16) / theirs16 < 2e-4);  // measured 4.4e-5 (2026-12-04)
  CHECK(ours16 != ours32);                               // bf16 really computed

  // A QLoRA run on it: model.quantize from its config.json; the adapters, for PEFT on transformers'
  // loading of the same folder, give our merged model's logits.
  write_file(dir.file("r.yaml"), small_qlora_recipe("q4", ""));
  const Settings s = load_recipe(dir.file("r.yaml"), {}, recipe_rules()).settings;
  CHECK(s.model.quantize.base == QuantBase::kNf4);
  const CommandResult run = run_recipe(dir.file("r.yaml"), dir.file("run"));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  CHECK_THAT(run.output, Contains("in 4 bits (model.quantize)"));
  REQUIRE(run_gputrain({"export", dir.file("run"), "--out", dir.file("adapter"), "--format", "peft"}).exit_code == 0);
  hf_interop({"peft", dir.file("q4"), dir.file("tokens.safetensors"), dir.file("peft.safetensors"), dir.file("adapter"),
              "stored"});
  const torch::Tensor peft = *read_safetensors(dir.file("peft.safetensors")).find("logits");
  const torch::Tensor adapted = merged_logits(dir.file("run"), s, tokens);
  CHECK((peft - adapted).abs().max().item<double>() < 1e-4);
  CHECK((adapted - theirs).abs().max().item<double>() > 1e-3);
  // ZeRO-3 over 2 processes cuts the stored blocks as they are (parallel/sharded_4bit_base.h): 1 process's losses.
  const CommandResult sharded =
      train(dir.file("r.yaml"), dir.file("zero3"), 2, {"parallel.zero=3", "train.per_device_batch_size=1"});
  INFO(sharded.output);
  REQUIRE(sharded.exit_code == 0);
  CHECK(max_abs_diff(column(dir.file("run"), "loss"), column(dir.file("zero3"), "loss")) < 1e-5);
  // tp 2 cuts each rank's slices' blocks from the stored ones (parallel/tensor_parallel_4bit.h).
  const CommandResult sliced = train(dir.file("r.yaml"), dir.file("tp2"), 2, {"parallel.tp=2"});
  INFO(sliced.output);
  REQUIRE(sliced.exit_code == 0);
  CHECK(max_abs_diff(column(dir.file("run"), "loss"), column(dir.file("tp2"), "loss")) < 1e-4);

  // What the folder holds disagrees with the recipe: named, with the fix.
  const auto refused = [&](const std::vector<std::string>& args, const std::string& words) {
    const CommandResult r = run_gputrain(args);
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Contains(words) && Contains("fix:"));
  };
  refused({"validate", dir.file("r.yaml"), "--set", "model.quantize.base=fp4"}, "model.quantize.base");
  refused({"validate", dir.file("r.yaml"), "--set", "model.lora.rank=0"}, "model.lora.rank");

  // A statistic missing (removed from its shard and the index) or an 8-bit folder: exit 2, naming them.
  fs::copy(dir.file("q4"), dir.file("broken"));
  const std::string absmax = "model.layers.0.mlp.down_proj.weight.absmax";
  nlohmann::json index = read_json(dir.file("broken/model.safetensors.index.json"));
  const std::string shard = dir.file("broken/" + index["weight_map"][absmax].get<std::string>());
  index["weight_map"].erase(absmax);
  write_file(dir.file("broken/model.safetensors.index.json"), index.dump());
  std::vector<NamedTensor> kept;
  for (auto& t : read_safetensors(shard).tensors)
    if (t.name != absmax) kept.push_back(std::move(t));
  write_safetensors(shard, kept);
  refused({"eval", dir.file("broken"), "--data", dir.file("text.txt"), "--tokenizer", "bytes", "--device", "cpu"},
          "model.layers.0.mlp.down_proj.weight is stored in 4 bits without its absmax");
  fs::copy(dir.file("base"), dir.file("eight"));
  nlohmann::json config = read_json(dir.file("eight/config.json"));
  config["quantization_config"] = {{"quant_method", "bitsandbytes"}, {"load_in_8bit", true}};
  write_file(dir.file("eight/config.json"), config.dump());
  refused({"validate", dir.file("r.yaml"), "--set", "model.init_from=" + dir.file("eight")}, "bitsandbytes in 8 bits");
}

namespace {

// The MiB in column `col` (0 = the first after the label) of the plan's table row starting `| label |`.
// (searched from `from`).
double plan_cell(const std::string& plan, const std::string& label, int col = 0, size_t from = 0) {
  const size_t at = plan.find("| " + label + " |", from);
  REQUIRE(at != std::string::npos);
  std::stringstream row(plan.substr(at + label.size() + 4, plan.find('\n', at) - at));
  std::string cell;
  for (int i = 0; i <= col; ++i) std::getline(row, cell, '|');
  return std::stod(cell);
}

}  // namespace

TEST_CASE("qlora: the configs/ recipes validate and plan within the GPU memory their headers name", "[qlora][cli]") {
  struct Case {
    const char* file;
    double gib;  // the header's "memory: N GiB"
    int world;   // processes (1: planned as one)
  };
  for (const Case& c : {Case{"qlora-llama3.1-8b.yaml", 16, 1}, Case{"qlora-qwen2.5-7b-chat.yaml", 16, 1},
                        Case{"qlora-llama3.1-70b.yaml", 48, 1}, Case{"qlora-llama3.1-70b-2gpu.yaml", 24, 2}}) {
    CAPTURE(c.file);
    const std::string path = std::string(GPUTRAIN_SOURCE_DIR) + "/configs/" + c.file;
    CHECK_THAT(read_file(path), Contains("# memory: " + std::to_string(static_cast<int>(c.gib)) + " GiB") ||
                                    Contains("memory: " + std::to_string(static_cast<int>(c.gib)) + " GiB per rank"));
    // The base is a download the header names; planned without it, from the recipe's own model keys.
    const CommandResult plan =
        run_gputrain({"plan", path, "--set", "model.init_from=", "--world-size", std::to_string(c.world)});
    INFO(plan.output);
    REQUIRE(plan.exit_code == 0);
    CHECK_THAT(plan.output, Contains("model.quantize: the blocks' Linear weights in 4 bits"));
    const double budget = c.gib * 1024;
    if (c.world == 1) {
      CHECK(plan_cell(plan.output, "total (estimate)") < budget);
      // 4 bits: the weights are under half of what bf16 would hold (embeddings and head stay bf16).
      const double parameters = std::stod(plan.output.substr(plan.output.find("parameters: ") + 12));
      CHECK(plan_cell(plan.output, "weights") < 0.5 * 2 * parameters / (1024 * 1024));
      continue;
    }
    // ZeRO-3 with parallel.offload_params: the GPU holds the units in use, a Linear dequantized, its
    // micro-batch's activations and logits; the shards (half the 4-bit base and of the tables) wait in host memory.
    const std::string line =
        "of which on the GPU (parallel.offload_params: the shards, their gradients and the "
        "optimizer state in host memory): ";
    const size_t at = plan.output.find(line);
    REQUIRE(at != std::string::npos);
    CHECK(std::stod(plan.output.substr(at + line.size())) < budget);
    const double whole = plan_cell(plan.output, "weights");
    CHECK(plan_cell(plan.output, "0", 0, plan.output.find("memory per rank")) < 0.55 * whole);
  }
  // The recipes load with their base in place (their keys agree with the download's config.json):
  // tests/unit/config/recipe_test.cpp "every recipe in configs/ validates".
}
