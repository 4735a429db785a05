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
#include "export_reference.h"
#include "same_tensors.h"
#include "test_util.h"

using namespace gputrain::test;
using Catch::Matchers::Contains;

namespace {

std::string config(const char* name) { return std::string(GPUTRAIN_SOURCE_DIR).append("/configs/").append(name); }

// configs/llama-shakespeare.yaml shrunk to seconds: 2 blocks of d 64, 4 query and 2 key/value heads.
const std::vector<std::string> kTinyLlama = {"model.n_layer=2",
                                             "model.d_model=64",
                                             "model.n_head=4",
                                             "model.n_kv_head=2",
                                             "model.seq_len=64",
                                             "train.per_device_batch_size=8",
                                             "train.max_steps=40",
                                             "train.log_every=5",
                                             "train.eval_every=0",
                                             "train.eval_steps=2",
                                             "optim.schedule.warmup_steps=4",
                                             "checkpoint.every=20",
                                             "run.threads=2",
                                             "metrics.progress=off"};

// A metric of every metrics.jsonl line that has it, in step order.
std::vector<double> column(const std::string& out, const char* key) {
  std::vector<double> v;
  for (const auto& row : read_jsonl(out + "/metrics.jsonl"))
    if (row.contains(key)) v.push_back(row[key].get<double>());
  return v;
}

std::vector<double> losses(const std::string& out) { return column(out, "loss"); }

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
  check_export_logits(dir.file("llama") + "/checkpoints/step_00000040", dir.file("hf"), "LlamaForCausalLM");
}

TEST_CASE(
    "cli: configs/moe-shakespeare.yaml trains at tiny size, reports balancing and dropping, and 2 processes "
    "match 1",
    "[cli][moe]") {
  TempDir dir;
  auto r = run_config("moe-shakespeare.yaml", dir.file("moe"), kTinyLlama);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("model: mixture of experts every 2 block(s): 8 experts, top 2"));
  const auto loss = losses(dir.file("moe"));
  CHECK(loss.back() < loss.front() - 1.5);
  size_t rows = 0;
  for (const auto& row : read_jsonl(dir.file("moe") + "/metrics.jsonl")) {
    if (!row.contains("loss")) continue;
    ++rows;
    // 1 = balanced, 8 = collapsed. An untrained router's near-equal probabilities still pick
    // correlated top-2 choices, so a capacity of 1.25x the even share drops many early on.
    CHECK(row["moe_aux_loss"].get<double>() >= 1.0);
    CHECK(row["moe_aux_loss"].get<double>() < 8.0);
    CHECK(row["moe_dropped_fraction"].get<double>() > 0.0);
    CHECK(row["moe_dropped_fraction"].get<double>() < 1.0);
  }
  CHECK(rows == loss.size());  // every logged step was looked at
  REQUIRE(rows > 0);
  const auto summary = read_json(dir.file("moe") + "/summary.json");
  CHECK(summary["moe"]["experts"] == 8);
  CHECK(summary["moe"]["layers"] == 1);                                     // of 2 blocks, block 1
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
  std::vector<std::string> args = {
      "run", config("moe-shakespeare.yaml"), "--output-dir", dir.file("two"), "--nproc-per-node", "2"};
  for (const auto& s : same) args.insert(args.end(), {"--set", s});
  auto two = run_gputrain(args);
  INFO(two.output);
  REQUIRE(two.exit_code == 0);
  const auto l1 = column(dir.file("one"), "loss"), l2 = column(dir.file("two"), "loss");
  const auto a1 = column(dir.file("one"), "moe_aux_loss"), a2 = column(dir.file("two"), "moe_aux_loss");
  REQUIRE(l1.size() == 2);  // steps 5 and 10 (train.log_every 5)
  REQUIRE(l2.size() == l1.size());
  REQUIRE(a1.size() == l1.size());
  REQUIRE(a2.size() == l1.size());
  for (size_t i = 0; i < l1.size(); ++i) {
    CHECK(std::abs(l1[i] - l2[i]) < 1e-4);
    CHECK(std::abs(a1[i] - a2[i]) < 1e-4);
  }
  const auto dropped = column(dir.file("two"), "moe_dropped_fraction");
  REQUIRE(dropped.size() == l1.size());
  for (const double d : dropped) CHECK(d == 0.0);  // no capacity limit

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

TEST_CASE(
    "cli: expert parallelism (parallel.ep) trains like replicated experts, with recomputation, over 4 "
    "processes, under a pipeline and with ZeRO, gathers every expert into its checkpoints, and resumes exactly, also "
    "at ep 1",
    "[cli][moe][parallel]") {
  TempDir dir;
  // The recipe's capacity (1.25): each rank routes and drops over its own capacity, with or without ep.
  const std::vector<std::string> same = with(kTinyLlama, {"train.max_steps=10", "train.per_device_batch_size=4",
                                                          "run.threads=1", "checkpoint.every=5", "train.log_every=1"});
  auto launch = [&](const std::string& name, int nproc, const std::vector<std::string>& extra) {
    std::vector<std::string> a = {"run",
                                  config("moe-shakespeare.yaml"),
                                  "--output-dir",
                                  dir.file(name),
                                  "--nproc-per-node",
                                  std::to_string(nproc)};
    for (const auto& s : with(same, extra)) a.insert(a.end(), {"--set", s});
    auto r = run_gputrain(a);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    return r;
  };
  auto same_numbers = [&](const std::string& a, const std::string& b) {
    INFO(a << " vs " << b);
    for (const char* key : {"loss", "moe_aux_loss", "grad_norm", "moe_dropped_fraction"}) {
      INFO(key);
      const auto x = column(dir.file(a), key), y = column(dir.file(b), key);
      REQUIRE(x.size() == y.size());
      for (size_t i = 0; i < x.size(); ++i) CHECK(std::abs(x[i] - y[i]) < 1e-4);
    }
  };
  launch("replicated", 2, {});
  auto ep = launch("ep2", 2, {"parallel.ep=2"});
  CHECK_THAT(ep.output, Contains("expert parallel: this rank holds experts 0-3 of each mixture layer's 8 (ep 2), "
                                 "their gradients reduced over 1 replica(s)"));
  same_numbers("replicated", "ep2");
  // Each rank holds half the experts: their weights and optimizer state are halved on every rank.
  const auto mem1 = read_json(dir.file("replicated") + "/summary.json")["memory_per_rank"];
  const auto mem2 = read_json(dir.file("ep2") + "/summary.json")["memory_per_rank"];
  for (int r = 0; r < 2; ++r)
    for (const char* key : {"weights_mb", "optimizer_state_mb", "grads_mb"}) {
      INFO(key);
      CHECK(mem2[r][key].get<double>() < 0.9 * mem1[r][key].get<double>());
    }
  // A recomputed mixture layer runs its exchanges again in backward.
  launch("ep2-recompute", 2, {"parallel.ep=2", "train.gradient_checkpointing=full"});
  same_numbers("replicated", "ep2-recompute");
  // 4 processes: two runs of ep 2, each expert held twice, its gradients summed over its holders.
  launch("replicated4", 4, {});
  auto ep4 = launch("ep2-of-4", 4, {"parallel.ep=2"});
  CHECK_THAT(ep4.output, Contains("their gradients reduced over 2 replica(s)"));
  same_numbers("replicated4", "ep2-of-4");
  // ZeRO splits each group's optimizer state: the dense parameters' over the dp group, each
  // expert's over its holders (ZeRO-2: their gradients too).
  launch("ep2-zero1", 2, {"parallel.ep=2", "parallel.zero=1"});
  same_numbers("replicated", "ep2-zero1");
  launch("ep2-of-4-zero2", 4, {"parallel.ep=2", "parallel.zero=2"});
  same_numbers("replicated4", "ep2-of-4-zero2");
  // With a pipeline (dp 2 x pp 2): the mixture layer's stage exchanges over its own dp ranks.
  launch("ep2-pp2", 4, {"parallel.ep=2", "parallel.pp=2"});
  same_numbers("replicated", "ep2-pp2");

  // The checkpoint holds every expert, as the replicated run's does (the ranks' files joined).
  for (const auto& [expected, got] :
       {std::pair<std::string, std::string>{"replicated", "ep2"}, {"replicated4", "ep2-of-4-zero2"}})
    for (const bool state : {false, true})
      check_same_model(dir.file(expected) + "/checkpoints/step_00000010", dir.file(got) + "/checkpoints/step_00000010",
                       1e-4, state);
  // Resumed at step 5 under ep 2 it continues bitwise; with replicated experts, within float sums.
  const std::string step5 = "checkpoint.resume=" + dir.file("ep2") + "/checkpoints/step_00000005";
  launch("ep2-resumed", 2, {"parallel.ep=2", step5});
  const auto straight = column(dir.file("ep2"), "loss"), resumed = column(dir.file("ep2-resumed"), "loss");
  REQUIRE(resumed.size() == 5);
  for (size_t i = 0; i < 5; ++i) CHECK(resumed[i] == straight[5 + i]);
  auto ep1 = launch("ep1-resumed", 2, {step5});
  CHECK_THAT(ep1.output, Contains("parallel.ep changed from 2 to 1"));
  const auto ep1_loss = column(dir.file("ep1-resumed"), "loss");
  REQUIRE(ep1_loss.size() == 5);
  for (size_t i = 0; i < 5; ++i) CHECK(std::abs(ep1_loss[i] - straight[5 + i]) < 1e-4);

  // The plan says which experts each rank holds.
  auto plan = run_gputrain({"plan", config("moe-shakespeare.yaml"), "--world-size", "4", "--set", "parallel.ep=2"});
  INFO(plan.output);
  CHECK(plan.exit_code == 0);
  CHECK_THAT(plan.output, Contains("expert parallel: ep 2 splits each mixture layer's 8 experts over runs of 2 "
                                   "consecutive dp ranks: the rank at place j of a run holds experts 4j to 4j+3; "
                                   "each expert has 2 holder(s)"));

  // Wrong degrees are refused before training, naming the key.
  for (const auto& [sets, nproc, message] :
       {std::tuple<std::vector<std::string>, int, std::string>{
            {"parallel.ep=3"}, 0, "parallel.ep: (3) must divide model.moe.experts (8)"},
        {{"parallel.ep=2"}, 0, "parallel.ep (2) must divide the data-parallel degree (1"},
        {{"parallel.ep=4"}, 2, "parallel.ep (4) must divide the data-parallel degree (2"}}) {
    std::vector<std::string> a = {"run", config("moe-shakespeare.yaml"), "--output-dir", dir.file("bad")};
    if (nproc > 0) a.insert(a.end(), {"--nproc-per-node", std::to_string(nproc)});
    for (const auto& s : with(same, sets)) a.insert(a.end(), {"--set", s});
    auto r = run_gputrain(a);
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Contains(message));
    CHECK_FALSE(std::filesystem::exists(dir.file("bad") + "/metrics.jsonl"));
  }
}

TEST_CASE(
    "cli: configs/lora-finetune.yaml fine-tunes an exported model with adapters only, resumes on its base "
    "alone, and exports merged",
    "[cli][lora]") {
  TempDir dir;
  // The base: the tiny Llama trained on the first 90% of the text, exported as transformers would load it.
  REQUIRE(run_config("llama-shakespeare.yaml", dir.file("base"), with(kTinyLlama, {"train.max_steps=150"})).exit_code ==
          0);
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
  std::vector<std::string> two = {"run",           config("lora-finetune.yaml"), "--output-dir",
                                  dir.file("two"), "--nproc-per-node",           "2"};
  for (const auto& s :
       with(lora, {"train.per_device_batch_size=4", "train.max_steps=10", "optim.schedule.decay_steps=40"}))
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
  REQUIRE(run_config("llama-shakespeare.yaml", dir.file("other"), with(kTinyLlama, {"train.max_steps=5"})).exit_code ==
          0);
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
  CHECK_FALSE(at::equal(*base_w.find("model.layers.0.self_attn.q_proj.weight"),
                        *lora_w.find("model.layers.0.self_attn.q_proj.weight")));
  CHECK(at::equal(*base_w.find("model.norm.weight"), *lora_w.find("model.norm.weight")));  // not adapted
  // merged = W + (alpha / r) B A, computed here from the exported checkpoint's adapters (alpha 16, rank 8),
  // for layers HF keeps whole (its q/k/v and gate/up are cut from our fused ones).
  const auto adapters = gputrain::read_safetensors(dir.file("lora") + "/checkpoints/step_00000040/model.safetensors");
  const std::vector<std::pair<std::string, std::string>> unfused = {
      {"transformer.h.0.attn.c_proj", "model.layers.0.self_attn.o_proj"},
      {"transformer.h.1.mlp.c_proj", "model.layers.1.mlp.down_proj"}};
  check_export_logits(dir.file("lora") + "/checkpoints/step_00000040", dir.file("lora_hf"), "LlamaForCausalLM");
  for (const auto& [ours, hf] : unfused) {
    INFO(hf);
    const at::Tensor *a = adapters.find(ours + ".lora_A"), *b = adapters.find(ours + ".lora_B");
    const at::Tensor *w = base_w.find(hf + ".weight"), *merged_w = lora_w.find(hf + ".weight");
    REQUIRE((a && b && w && merged_w));
    REQUIRE(a->size(0) == 8);
    const at::Tensor delta = at::matmul(*b, *a);
    CHECK((*merged_w - (*w + (16.0 / 8.0) * delta)).abs().max().item<double>() < 1e-6);
    CHECK(delta.abs().max().item<double>() > 1e-3);  // the adapters did move away from B = 0
  }
}

TEST_CASE("cli: configs/chat-lora.yaml fine-tunes the exported base on chat rows, loss on the replies only",
          "[cli][lora][chat]") {
  TempDir dir;
  REQUIRE(run_config("llama-shakespeare.yaml", dir.file("base"), with(kTinyLlama, {"train.max_steps=60"})).exit_code ==
          0);
  REQUIRE(run_gputrain({"export", dir.file("base"), "--out", dir.file("base_hf")}).exit_code == 0);
  auto prep = run_gputrain({"data", "prepare", std::string(GPUTRAIN_SOURCE_DIR) + "/configs/data/chat-sample.jsonl",
                            "-o", dir.file("chat"), "--format", "chat", "--tokenizer", "bytes", "--val-fraction", "0.1",
                            "--progress", "off"});
  INFO(prep.output);
  REQUIRE(prep.exit_code == 0);
  CHECK_THAT(prep.output, Contains("rendered with the plain template"));
  auto r = run_config(
      "chat-lora.yaml", dir.file("lora"),
      with(kTinyLlama, {"model.init_from=" + dir.file("base_hf"), "data.train.path=" + dir.file("chat/train_*.bin"),
                        "data.eval.path=" + dir.file("chat/val_*.bin"), "train.max_steps=60", "optim.lr=1e-2",
                        "train.eval_every=30", "train.eval_steps=4"}));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("loss on the masked-in (assistant) tokens only"));
  CHECK_THAT(r.output, Contains("packed by document") && Contains("each document attending only to itself"));
  const auto eval = column(dir.file("lora"), "eval_loss");
  REQUIRE(eval.size() == 2);
  const auto loss = losses(dir.file("lora"));
  CHECK(loss.back() < loss.front() - 0.3);  // the replies (copies of the prompt) are learnable
  const auto summary = read_json(dir.file("lora") + "/summary.json");
  CHECK(summary["lora"]["trainable_parameters"].get<int64_t>() > 0);
  // Only reply tokens count: far fewer than the windows' positions.
  CHECK(summary["tokens"].get<int64_t>() < 60 * 8 * 64 / 2);
}
