// The model options through the gputrain binary, each recipe of configs/ at
// tiny size on real text: Llama (trains, resumes exactly, exports for
// transformers), mixture of experts (balancing and dropping reported, 2
// processes match 1) and LoRA fine-tuning of an exported model (adapters-only
// checkpoints on a fingerprinted base, merged export).
#include <catch2/catch.hpp>

#include <filesystem>
#include <tuple>

#include <ATen/ATen.h>

#include "checkpoint/safetensors.h"
#include "test_util.h"

using namespace gputrain::test;
using Catch::Matchers::Contains;

namespace {

std::string config(const char* name) { return std::string(GPUTRAIN_SOURCE_DIR) + "/configs/" + name; }

// configs/llama-shakespeare.yaml shrunk to seconds: 2 blocks of d 64, 4 query and 2 key/value heads.
const std::vector<std::string> kTinyLlama = {
    "model.n_layer=2", "model.d_model=64", "model.n_head=4", "model.n_kv_head=2", "model.seq_len=64",
    "train.per_device_batch_size=8", "train.max_steps=40", "train.log_every=5", "train.eval_every=0",
    "train.eval_steps=2", "optim.schedule.warmup_steps=4", "checkpoint.every=20", "run.threads=2",
    "metrics.progress=off"};

// A metric of every metrics.jsonl line that has it, in step order.
std::vector<double> column(const std::string& out, const char* key) {
  std::vector<double> v;
  for (const auto& row : read_jsonl(out + "/metrics.jsonl"))
    if (row.contains(key)) v.push_back(row[key].get<double>());
  return v;
}

std::vector<double> losses(const std::string& out) { return column(out, "loss"); }

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

CommandResult run_config(const char* name, const std::string& out, std::vector<std::string> sets) {
  std::vector<std::string> args = {"run", config(name), "--output-dir", out};
  for (const auto& s : sets) args.insert(args.end(), {"--set", s});
  return run_gputrain(args);
}

}  // namespace

TEST_CASE("cli: configs/llama-shakespeare.yaml trains at tiny size, resumes exactly and exports as LlamaForCausalLM",
          "[cli][llama]") {
  TempDir dir;
  auto r = run_config("llama-shakespeare.yaml", dir.file("llama"), kTinyLlama);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("model: Llama 2 layers, d_model 64, 4 heads (2 key/value)"));
  const auto loss = losses(dir.file("llama"));
  REQUIRE(loss.size() == 8);
  // Bytes start at log(256) = 5.55 nats; 40 steps of real text must take off a good part of that.
  CHECK(loss.front() > 5.0);
  CHECK(loss.back() < loss.front() - 1.5);
  const auto summary = read_json(dir.file("llama") + "/summary.json");
  CHECK(summary["eval_loss"].get<double>() < 4.0);

  // Resumed from step 20, the last 20 steps repeat bitwise.
  std::vector<std::string> resume = kTinyLlama;
  resume.push_back("checkpoint.resume=" + dir.file("llama") + "/checkpoints/step_00000020");
  auto again = run_config("llama-shakespeare.yaml", dir.file("resumed"), resume);
  INFO(again.output);
  REQUIRE(again.exit_code == 0);
  const auto resumed = losses(dir.file("resumed"));
  REQUIRE(resumed.size() == 4);
  for (size_t i = 0; i < resumed.size(); ++i) CHECK(resumed[i] == loss[loss.size() - 4 + i]);

  auto exported = run_gputrain({"export", dir.file("llama"), "--format", "hf", "--out", dir.file("hf")});
  INFO(exported.output);
  REQUIRE(exported.exit_code == 0);
  CHECK_THAT(exported.output, Contains("as Hugging Face LlamaForCausalLM"));
  const auto hf_config = read_json(dir.file("hf") + "/config.json");
  CHECK(hf_config["num_key_value_heads"] == 2);
  CHECK(hf_config["tie_word_embeddings"] == false);
  CHECK(std::filesystem::exists(dir.file("hf") + "/model.safetensors"));
}

TEST_CASE("cli: configs/moe-shakespeare.yaml trains at tiny size, reports balancing and dropping, and 2 processes "
          "match 1",
          "[cli][moe]") {
  TempDir dir;
  auto r = run_config("moe-shakespeare.yaml", dir.file("moe"), kTinyLlama);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("model: mixture of experts every 2 block(s): 8 experts, top 2"));
  const auto loss = losses(dir.file("moe"));
  CHECK(loss.back() < loss.front() - 1.5);
  for (const auto& row : read_jsonl(dir.file("moe") + "/metrics.jsonl")) {
    if (!row.contains("loss")) continue;
    // 1 = balanced, 8 = collapsed. An untrained router's near-equal probabilities still pick
    // correlated top-2 choices, so a capacity of 1.25x the even share drops many early on.
    CHECK(row["moe_aux_loss"].get<double>() >= 1.0);
    CHECK(row["moe_aux_loss"].get<double>() < 8.0);
    CHECK(row["moe_dropped_fraction"].get<double>() > 0.0);
    CHECK(row["moe_dropped_fraction"].get<double>() < 1.0);
  }
  const auto summary = read_json(dir.file("moe") + "/summary.json");
  CHECK(summary["moe"]["experts"] == 8);
  CHECK(summary["moe"]["layers"] == 1);  // of 2 blocks, block 1
  CHECK(summary["moe"]["assignments"].get<double>() == 40.0 * 8 * 64 * 2);  // tokens x top 2
  CHECK(summary["moe"]["active_parameters"].get<double>() < summary["parameters"].get<double>());

  // Not a Hugging Face model: export says so instead of writing something else.
  auto e = run_gputrain({"export", dir.file("moe"), "--out", dir.file("hf")});
  CHECK(e.exit_code != 0);
  CHECK_THAT(e.output, Contains("mixture-of-experts"));

  // Data parallelism: each rank routes its own micro-batch, so 1 process with the same
  // micro-batches (2 of 4 sequences) is the reference; no capacity, so no rank drops differently.
  const std::vector<std::string> same = with(kTinyLlama, {"train.max_steps=10", "model.moe.capacity_factor=0",
                                                          "train.per_device_batch_size=4", "run.threads=1"});
  auto one = run_config("moe-shakespeare.yaml", dir.file("one"), with(same, {"train.grad_accum_steps=2"}));
  REQUIRE(one.exit_code == 0);
  std::vector<std::string> args = {"run", config("moe-shakespeare.yaml"), "--output-dir", dir.file("two"), "--nproc-per-node", "2"};
  for (const auto& s : same) args.insert(args.end(), {"--set", s});
  auto two = run_gputrain(args);
  INFO(two.output);
  REQUIRE(two.exit_code == 0);
  const auto l1 = column(dir.file("one"), "loss"), l2 = column(dir.file("two"), "loss");
  const auto a1 = column(dir.file("one"), "moe_aux_loss"), a2 = column(dir.file("two"), "moe_aux_loss");
  REQUIRE(l1.size() == l2.size());
  for (size_t i = 0; i < l1.size(); ++i) {
    CHECK(std::abs(l1[i] - l2[i]) < 1e-4);
    CHECK(std::abs(a1[i] - a2[i]) < 1e-4);
  }
  for (const double dropped : column(dir.file("two"), "moe_dropped_fraction")) CHECK(dropped == 0.0);  // no capacity limit

  // The balancing loss reaches routers on another pipeline stage, and a recomputed (checkpointed)
  // mixture layer neither counts its statistics twice nor loses its balancing gradient.
  for (const auto& [name, extra, nproc] : {std::tuple<std::string, std::string, int>{"pp2", "parallel.pp=2", 2},
                                           {"recompute", "train.gradient_checkpointing=full", 0}}) {
    INFO(name);
    std::vector<std::string> a = {"run", config("moe-shakespeare.yaml"), "--output-dir", dir.file(name)};
    if (nproc > 0) a.insert(a.end(), {"--nproc-per-node", std::to_string(nproc)});
    for (const auto& s : with(same, {"train.grad_accum_steps=2", extra})) a.insert(a.end(), {"--set", s});
    auto v = run_gputrain(a);
    INFO(v.output);
    REQUIRE(v.exit_code == 0);
    const auto lv = column(dir.file(name), "loss"), av = column(dir.file(name), "moe_aux_loss");
    const auto nv = column(dir.file(name), "grad_norm"), n1 = column(dir.file("one"), "grad_norm");
    REQUIRE(lv.size() == l1.size());
    for (size_t i = 0; i < l1.size(); ++i) {
      CHECK(std::abs(l1[i] - lv[i]) < 1e-4);
      CHECK(std::abs(a1[i] - av[i]) < 1e-4);
      CHECK(std::abs(n1[i] - nv[i]) < 1e-4);
    }
    CHECK(read_json(dir.file(name) + "/summary.json")["moe"]["assignments"] ==
          read_json(dir.file("one") + "/summary.json")["moe"]["assignments"]);
  }
}

TEST_CASE("cli: configs/lora-finetune.yaml fine-tunes an exported model with adapters only, resumes on its base "
          "alone, and exports merged",
          "[cli][lora]") {
  TempDir dir;
  // The base: the tiny Llama trained on the first 90% of the text, exported as transformers would load it.
  REQUIRE(run_config("llama-shakespeare.yaml", dir.file("base"), with(kTinyLlama, {"train.max_steps=150"})).exit_code == 0);
  REQUIRE(run_gputrain({"export", dir.file("base"), "--out", dir.file("base_hf")}).exit_code == 0);
  // Evaluated after every step on the same held-out batches: step 1 is the base (plus one small step).
  const std::vector<std::string> lora =
      with(kTinyLlama, {"model.init_from=" + dir.file("base_hf"), "checkpoint.every=20", "train.max_steps=40",
                        "model.lora.dropout=0", "optim.lr=1e-2", "train.eval_every=1", "train.eval_steps=4"});
  auto r = run_config("lora-finetune.yaml", dir.file("lora"), lora);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("LoRA rank 8 (alpha 16)"));
  CHECK_THAT(r.output, Contains("Hugging Face Llama weights from"));
  const auto loss = losses(dir.file("lora"));
  CHECK(loss.front() < 3.0);  // it starts from the trained base (a random model starts at 5.5)
  const auto eval = column(dir.file("lora"), "eval_loss");
  REQUIRE(eval.size() == 40);
  CHECK(eval.back() < eval.front() - 0.01);  // the adapters learn the new span
  const auto summary = read_json(dir.file("lora") + "/summary.json");
  const auto& l = summary["lora"];
  // Rank 8 on 4 layers of 2 blocks (d 64; SwiGLU width 192, c_fc 384 rows; c_attn 64 + 2 x 32 rows).
  CHECK(l["trainable_parameters"] == 2 * (8 * (64 + 128) + 8 * (64 + 64) + 8 * (64 + 384) + 8 * (192 + 64)));
  CHECK(l["optimizer_state_mb"].get<double>() < 0.2 * l["full_finetune_optimizer_state_mb"].get<double>());

  // Two processes train the same adapters as one (the frozen base takes no part in the reduction).
  std::vector<std::string> two = {"run", config("lora-finetune.yaml"), "--output-dir", dir.file("two"), "--nproc-per-node", "2"};
  for (const auto& s : with(lora, {"train.per_device_batch_size=4", "train.max_steps=10", "optim.schedule.decay_steps=40"}))
    two.insert(two.end(), {"--set", s});
  auto dp = run_gputrain(two);
  INFO(dp.output);
  REQUIRE(dp.exit_code == 0);
  const auto dp_loss = losses(dir.file("two"));
  REQUIRE(dp_loss.size() == 10);
  for (size_t i = 0; i < dp_loss.size(); ++i) CHECK(std::abs(dp_loss[i] - loss[i]) < 1e-4);

  // The checkpoint holds the adapters alone, and the base's fingerprint.
  const std::string step20 = dir.file("lora") + "/checkpoints/step_00000020";
  for (const auto& t : gputrain::read_safetensors(step20 + "/model.safetensors").tensors) {
    INFO(t.name);
    CHECK((t.name.ends_with(".lora_A") || t.name.ends_with(".lora_B")));
  }
  CHECK(read_json(step20 + "/trainer.json")["lora_base"].get<std::string>().rfind("crc32c:", 0) == 0);
  // Resumed from it (the base rebuilt from model.init_from), the losses repeat bitwise.
  auto resumed = run_config("lora-finetune.yaml", dir.file("resumed"), with(lora, {"checkpoint.resume=" + step20}));
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  const auto again = losses(dir.file("resumed"));
  REQUIRE(again.size() == 20);
  for (size_t i = 0; i < again.size(); ++i) CHECK(again[i] == loss[loss.size() - 20 + i]);
  // On another base the adapters mean nothing: refused, naming the fix.
  REQUIRE(run_config("llama-shakespeare.yaml", dir.file("other"), with(kTinyLlama, {"train.max_steps=5"})).exit_code == 0);
  REQUIRE(run_gputrain({"export", dir.file("other"), "--out", dir.file("other_hf")}).exit_code == 0);
  auto wrong = run_config("lora-finetune.yaml", dir.file("wrong"),
                          with(lora, {"checkpoint.resume=" + step20, "model.init_from=" + dir.file("other_hf")}));
  CHECK(wrong.exit_code != 0);
  CHECK_THAT(wrong.output, Contains("LoRA adapters trained on another base model"));

  // Export: plain weights need the merge; merged, the adapted layers differ from the base's.
  auto unmerged = run_gputrain({"export", dir.file("lora"), "--out", dir.file("lora_hf")});
  CHECK(unmerged.exit_code == 2);
  CHECK_THAT(unmerged.output, Contains("--merge-lora"));
  auto merged = run_gputrain({"export", dir.file("lora"), "--merge-lora", "--out", dir.file("lora_hf")});
  INFO(merged.output);
  REQUIRE(merged.exit_code == 0);
  const auto base_w = gputrain::read_safetensors(dir.file("base_hf") + "/model.safetensors");
  const auto lora_w = gputrain::read_safetensors(dir.file("lora_hf") + "/model.safetensors");
  REQUIRE(base_w.tensors.size() == lora_w.tensors.size());
  CHECK_FALSE(at::equal(*base_w.find("model.layers.0.self_attn.q_proj.weight"), *lora_w.find("model.layers.0.self_attn.q_proj.weight")));
  CHECK(at::equal(*base_w.find("model.norm.weight"), *lora_w.find("model.norm.weight")));  // not adapted
}
