// Preference alignment (docs/preference.md) through the CLI: DPO (each loss), ORPO and SimPO step for
// step as TRL's own trainers on the same tiny Llama, tokenizer and pairs; 2 processes as 1; a
// resumed run as an uninterrupted one; LoRA's reference as the base; and the recipe errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "parallel_runs.h"
#include "test_util.h"

using namespace gputrain::test;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

std::string preference_script() {
  return std::string(GPUTRAIN_SOURCE_DIR) + "/tests/reference/preference_reference.py";
}

// Short pairs of unequal lengths (IPO's per-token margins and the padding both matter).
const char* kPairs =
    R"({"prompt": "The capital of France is", "chosen": " Paris, a city on the Seine.", "rejected": " Berlin."}
{"prompt": "Two plus two equals", "chosen": " four.", "rejected": " five, or so I am told by a friend."}
{"prompt": "Name a colour of the sky:", "chosen": " blue", "rejected": " green with purple stripes"}
{"prompt": "Q: Who wrote Hamlet?\nA:", "chosen": " William Shakespeare wrote it.", "rejected": " Nobody knows."}
{"prompt": "Translate 'chat' into English:", "chosen": " cat", "rejected": " dog"}
{"prompt": "Water boils at", "chosen": " one hundred degrees Celsius at sea level.", "rejected": " ten degrees."}
)";
constexpr int kPairCount = 6;

// A tiny random Llama (transformers, seed 0) with the mistral SentencePiece tokenizer, and the pairs
// prepared from it: made once for every test here.
struct PreferenceData {
  TempDir dir;
  PreferenceData() {
    const CommandResult base =
        run_python({preference_script(), "base", reference_tokenizer("mistral/tokenizer.json"), dir.file("base")});
    INFO(base.output);
    REQUIRE(base.exit_code == 0);
    write_file(dir.file("pairs.jsonl"), kPairs);
    const CommandResult prepared =
        run_gputrain({"data", "prepare", dir.file("pairs.jsonl"), "--format", "preference", "--tokenizer",
                      dir.file("base"), "-o", dir.file("data"), "--val-fraction", "0"});
    INFO(prepared.output);
    REQUIRE(prepared.exit_code == 0);
  }
  // Every pair per step, fp32, plain SGD at a constant lr, no clipping: what the TRL runs do.
  std::string recipe(const std::string& objective, const std::string& extra = "") const {
    const std::string path = dir.file(objective + "_recipe.yaml");
    std::string text = "model: {init_from: " + dir.file("base") + ", seq_len: 48}\n";
    text += "data:\n  train: {format: preference, path: " + dir.file("data/train_pairs.bin") + "}\n";
    text += "train: {objective: " + objective + ", max_steps: 3, per_device_batch_size: " + std::to_string(kPairCount) +
            ", log_every: 1, max_grad_norm: 0}\n";
    text += "optim: {name: sgd, lr: 0.3, weight_decay: 0, sgd: {momentum: 0}, schedule: {name: constant}}\n";
    text += "precision: {mode: fp32}\nrun: {threads: 2}\nmetrics: {progress: off}\n" + extra;
    write_file(path, text);
    return path;
  }
};

const PreferenceData& data() {
  static const PreferenceData d;
  return d;
}

const std::vector<std::string> kCompared = {
    "loss",         "rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins",
    "logps/chosen", "logps/rejected"};

// Each logged line's loss and TRL's metrics agree within `tolerance` (relative above 1); returns the
// largest difference. `our_loss`: the field compared with TRL's loss (with log_every > 1 TRL logs the
// interval's mean, our `loss_avg`; `loss` is the last step's).
double check_close_steps(const std::vector<nlohmann::json>& ours, const nlohmann::json& theirs, double tolerance,
                         const std::string& our_loss = "loss") {
  REQUIRE(ours.size() == theirs.size());
  double largest = 0;
  for (size_t i = 0; i < ours.size(); ++i)
    for (const std::string& key : kCompared) {
      const std::string mine = key == "loss" ? our_loss : key;
      INFO("line " << i + 1 << " " << mine << ": " << ours[i].dump() << " against " << theirs[i].dump());
      REQUIRE(ours[i].contains(mine));
      const double a = ours[i][mine].get<double>(), b = theirs[i][key].get<double>();
      const double off = std::abs(a - b) / std::max(1.0, std::abs(b));
      CHECK(off <= tolerance);
      largest = std::max(largest, off);
    }
  return largest;
}

// In float32 within 1e-5: the same computation in another order.
void check_same_steps(const std::vector<nlohmann::json>& ours, const nlohmann::json& theirs,
                      const std::string& our_loss = "loss") {
  check_close_steps(ours, theirs, 1e-5, our_loss);
}

// Under bf16 autocast the two models round differently (fused q, k, v and SDPA against TRL's eager
// Llama): measured 4.6e-3 (2026-12-07), DPO with a frozen copy and with the precomputed reference.
constexpr double kBf16Tolerance = 1e-2;

// Each evaluation's loss and metrics in `two` agree with `one`'s; there are some exactly where the
// runs' `sets` evaluate.
void check_same_evaluations(const std::vector<nlohmann::json>& two, const std::vector<nlohmann::json>& one,
                            const std::vector<std::string>& sets) {
  size_t evaluated = 0;
  for (size_t i = 0; i < one.size(); ++i)
    for (const std::string& key : kCompared) {
      const std::string eval_key = key == "loss" ? "eval_loss" : "eval_" + key;
      if (!one[i].contains(eval_key)) continue;
      INFO("step " << i + 1 << " " << eval_key);
      REQUIRE(two[i].contains(eval_key));
      CHECK(two[i][eval_key].get<double>() == Approx(one[i][eval_key].get<double>()).epsilon(1e-5).margin(1e-6));
      ++evaluated;
    }
  const bool evaluates = std::find(sets.begin(), sets.end(), "train.eval_every=2") != sets.end();
  CHECK((evaluates ? evaluated >= kCompared.size() : evaluated == 0));
}

// `objective`'s recipe with `sets` trained by one process and by two with `parallel` too: the same
// steps, and the same evaluations where `sets` evaluate.
// The one-process run of `objective` with `sets`: trained once per test process, as several layouts
// compare against the same one.
const std::vector<nlohmann::json>& one_process_run(const std::string& objective, const std::vector<std::string>& sets) {
  static TempDir runs;
  static std::map<std::string, std::vector<nlohmann::json>> lines;
  const std::string key = nlohmann::json{objective, sets}.dump();
  if (const auto it = lines.find(key); it != lines.end()) return it->second;
  const std::string out = runs.file("one" + std::to_string(lines.size()));
  const CommandResult r = run_recipe(data().recipe(objective), out, sets);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return lines[key] = read_jsonl(out + "/metrics.jsonl");
}

void check_two_processes_as_one(const std::string& objective, const std::vector<std::string>& sets,
                                const std::vector<std::string>& parallel) {
  const std::string recipe = data().recipe(objective);
  TempDir out;
  const std::vector<nlohmann::json>& one = one_process_run(objective, sets);
  const CommandResult r = train(recipe, out.file("two"), 2, with(sets, parallel));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const std::vector<nlohmann::json> two = read_jsonl(out.file("two/metrics.jsonl"));
  check_same_steps(two, one);
  check_same_evaluations(two, one, sets);
}

// LoRA adapters (a larger lr: they start at zero), and evaluation on the training pairs every 2 steps.
const std::vector<std::string> kLora = {"model.lora.rank=4", "optim.lr=0.5"};
std::vector<std::string> evaluation_sets() {
  return {"data.eval.format=preference", "data.eval.path=" + data().dir.file("data/train_pairs.bin"),
          "train.eval_every=2"};
}

// A case of preference_reference.py's TRL runs: 3 steps of SGD at lr 0.3, beta 0.1, unless `settings`
// say otherwise.
nlohmann::json trl_case(const std::string& objective, const nlohmann::json& settings = nlohmann::json::object()) {
  nlohmann::json t = {{"objective", objective}, {"steps", 3}, {"lr", 0.3}, {"beta", 0.1}};
  t.update(settings);
  return t;
}

// TRL's runs of `cases` (each its preference_reference.py settings) on the shared pairs.
nlohmann::json trl_runs(const nlohmann::json& cases, const std::string& name) {
  const PreferenceData& d = data();
  write_file(d.dir.file(name + "_cases.json"), cases.dump());
  const CommandResult trl = run_python({preference_script(), "train", d.dir.file("base"), d.dir.file("pairs.jsonl"),
                                        d.dir.file(name + "_cases.json"), d.dir.file(name + "_trl.json")});
  INFO(trl.output);
  REQUIRE(trl.exit_code == 0);
  return read_json(d.dir.file(name + "_trl.json"));
}

std::vector<nlohmann::json> our_run(const std::string& objective, const std::vector<std::string>& sets) {
  TempDir out;
  const CommandResult run = run_recipe(data().recipe(objective), out.file("run"), sets);
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  return read_jsonl(out.file("run/metrics.jsonl"));
}

}  // namespace

TEST_CASE("preference: DPO (sigmoid, ipo, hinge, robust), ORPO and SimPO train step for step as TRL", "[slow]") {
  struct Case {
    const char* objective;
    nlohmann::json trl;             // TRL's config of it
    std::vector<std::string> sets;  // ours
  };
  const std::vector<Case> cases = {
      {"dpo", {{"loss", "sigmoid"}}, {}},
      // TRL's two rows a pair (the others compute each prompt once).
      {"dpo", {{"loss", "sigmoid"}}, {"data.train.shared_prompt=false"}},
      // Packed: several pairs a row of 48 (each alone by document attention), in either layout.
      {"dpo", {{"loss", "sigmoid"}}, {"data.train.pack_pairs=true"}},
      {"dpo", {{"loss", "sigmoid"}}, {"data.train.shared_prompt=false", "data.train.pack_pairs=true"}},
      // IPO's squared loss (about 25 at the start) takes a small step, or fp32's rounding grows.
      {"dpo", {{"loss", "ipo"}, {"lr", 0.01}}, {"train.preference.loss=ipo", "optim.lr=0.01"}},
      {"dpo", {{"loss", "hinge"}, {"beta", 0.5}}, {"train.preference.loss=hinge", "train.preference.beta=0.5"}},
      {"dpo",
       {{"loss", "robust"}, {"label_smoothing", 0.1}},
       {"train.preference.loss=robust", "train.preference.label_smoothing=0.1"}},
      {"orpo", {{"beta", 0.2}}, {"train.preference.beta=0.2"}},
      // ORPO's NLL over each whole chosen sequence, found in its packed row.
      {"orpo", {{"beta", 0.2}}, {"train.preference.beta=0.2", "data.train.pack_pairs=true"}},
      {"simpo",
       {{"beta", 2.0}, {"simpo_gamma", 0.8}, {"sft_weight", 0.5}, {"label_smoothing", 0.1}},
       {"train.preference.beta=2", "train.preference.simpo_gamma=0.8", "train.preference.sft_weight=0.5",
        "train.preference.label_smoothing=0.1"}},
  };
  nlohmann::json trl_cases = nlohmann::json::array();
  for (const Case& c : cases) trl_cases.push_back(trl_case(c.objective, c.trl));
  const nlohmann::json theirs = trl_runs(trl_cases, "steps");
  for (size_t i = 0; i < cases.size(); ++i) {
    INFO(cases[i].objective << " " << cases[i].trl.dump());
    const std::vector<nlohmann::json> ours = our_run(cases[i].objective, cases[i].sets);
    check_same_steps(ours, theirs[i]);
    // The steps moved the rewards apart: a comparison of numbers that stay put would prove nothing.
    CHECK(std::abs(ours.back()["rewards/margins"].get<double>() - ours.front()["rewards/margins"].get<double>()) >
          0.01);
  }
}

namespace {

// Each logged line's mean reference log-probability of the chosen completions, as the metrics imply it:
// rewards/chosen = beta (logps/chosen - reference's).
std::vector<double> reference_chosen_logps(const nlohmann::json& lines, double beta) {
  std::vector<double> ref;
  for (const auto& l : lines) ref.push_back(l["logps/chosen"].get<double>() - l["rewards/chosen"].get<double>() / beta);
  return ref;
}

}  // namespace

TEST_CASE(
    "preference: against TRL in the regimes people run: bf16, dropout, accumulation with log_every 2, and ORPO "
    "on completions the model already finds likely",
    "[slow]") {
  const PreferenceData& d = data();
  SECTION("bf16 autocast: the reference (a copy, or precomputed) runs under it as the policy does") {
    const nlohmann::json theirs =
        trl_runs({trl_case("dpo", {{"bf16", true}}), trl_case("dpo", {{"bf16", true}, {"precompute", true}})}, "bf16");
    const std::vector<std::vector<std::string>> ours = {
        {"precision.mode=bf16"}, {"precision.mode=bf16", "train.preference.reference=precomputed"}};
    for (size_t i = 0; i < ours.size(); ++i) {
      INFO(nlohmann::json(ours[i]).dump());
      const std::vector<nlohmann::json> lines = our_run("dpo", ours[i]);
      // Before the first update the policy is the reference, in the same precision: no reward at all,
      // in TRL's run as in ours (a reference in float32 gives ~1e-3).
      CHECK(lines.front()["rewards/chosen"].get<double>() == 0.0);
      CHECK(lines.front()["rewards/rejected"].get<double>() == 0.0);
      CHECK(theirs[i].front()["rewards/chosen"].get<double>() == 0.0);
      const double off = check_close_steps(lines, theirs[i], kBf16Tolerance);
      WARN("bf16 against TRL, " << nlohmann::json(ours[i]).dump() << ": largest difference " << off);
    }
  }
  SECTION("dropout: the policy trains with it, the reference and the precomputing pass run without") {
    const double beta = 0.1;
    const nlohmann::json theirs = trl_runs({trl_case("dpo", {{"beta", beta}, {"dropout", 0.2}}),
                                            trl_case("dpo", {{"beta", beta}, {"dropout", 0.2}, {"precompute", true}})},
                                           "dropout");
    const std::vector<nlohmann::json> plain = our_run("dpo", {});
    const double reference = plain.front()["logps/chosen"].get<double>();  // the starting weights', no dropout
    const std::vector<std::vector<std::string>> ours = {
        {"model.dropout=0.2"}, {"model.dropout=0.2", "train.preference.reference=precomputed"}};
    for (size_t i = 0; i < ours.size(); ++i) {
      INFO(nlohmann::json(ours[i]).dump());
      const std::vector<nlohmann::json> lines = our_run("dpo", ours[i]);
      // The policy's log-probabilities carry the dropout (the same weights give others than without it)...
      CHECK(std::abs(lines.front()["logps/chosen"].get<double>() - reference) > 1e-2);
      // ...and every step's reference is the starting weights' without it, as TRL's is (metrics are
      // rounded to 1e-6, which rewards / beta makes 1e-5).
      for (double r : reference_chosen_logps(lines, beta)) CHECK(std::abs(r - reference) < 1e-4);
      for (double r : reference_chosen_logps(theirs[i], beta)) CHECK(std::abs(r - reference) < 1e-4);
    }
    // LoRA's reference is the policy itself, adapters off, in training mode: it too runs without dropout.
    // (TRL's runs with it there: it switches the adapters off on the training policy; docs/preference.md.)
    const std::vector<nlohmann::json> lora = our_run("dpo", with(kLora, {"model.dropout=0.2"}));
    CHECK(std::abs(lora.front()["logps/chosen"].get<double>() - reference) > 1e-2);
    for (double r : reference_chosen_logps(lora, beta)) CHECK(std::abs(r - reference) < 1e-4);
  }
  SECTION("accumulation with a line every 2 steps: each line the interval's averages, as TRL logs them") {
    const std::vector<std::string> interval = {"train.max_steps=4", "train.per_device_batch_size=3",
                                               "train.grad_accum_steps=2", "train.log_every=2"};
    const nlohmann::json trl_interval = {{"steps", 4}, {"batch", 3}, {"accumulation", 2}, {"log_every", 2}};
    nlohmann::json simpo = {{"beta", 2.0}, {"simpo_gamma", 0.8}};
    simpo.update(trl_interval);
    const nlohmann::json theirs = trl_runs({trl_case("dpo", trl_interval), trl_case("simpo", simpo)}, "interval");
    const std::vector<nlohmann::json> ours_dpo = our_run("dpo", interval),
                                      ours_simpo =
                                          our_run("simpo", with(interval, {"train.preference.beta=2",
                                                                           "train.preference.simpo_gamma=0.8"}));
    REQUIRE(ours_dpo.size() == 2);
    check_same_steps(ours_dpo, theirs[0], "loss_avg");
    check_same_steps(ours_simpo, theirs[1], "loss_avg");
    // The second line is not the last step's alone: the steps moved the rewards apart between them.
    const std::vector<nlohmann::json> every = our_run("dpo", with(interval, {"train.log_every=1"}));
    REQUIRE(every.size() == 4);
    CHECK(std::abs(ours_dpo[1]["rewards/margins"].get<double>() - every[3]["rewards/margins"].get<double>()) > 1e-3);
  }
  SECTION("ORPO where each completion's mean log-probability is above -ln 2") {
    const CommandResult likely = run_python(
        {preference_script(), "likely", d.dir.file("base"), d.dir.file("pairs.jsonl"), d.dir.file("likely")});
    INFO(likely.output);
    REQUIRE(likely.exit_code == 0);
    const nlohmann::json theirs = trl_runs(
        nlohmann::json::array({trl_case("orpo", {{"lr", 0.01}, {"beta", 0.2}, {"model", d.dir.file("likely")}})}),
        "likely");
    const std::vector<nlohmann::json> lines =
        our_run("orpo", {"model.init_from=" + d.dir.file("likely"), "train.preference.beta=0.2", "optim.lr=0.01"});
    // ORPO's logps are each completion's mean token log-probability: log(1 - p) in its other branch.
    CHECK(lines.front()["logps/chosen"].get<double>() > -0.6931);
    CHECK(lines.front()["logps/rejected"].get<double>() > -0.6931);
    check_same_steps(lines, theirs[0]);
  }
}

TEST_CASE("preference: 2 processes train as one: dp, ZeRO-2, ZeRO-3, tp, pp (DPO's copy and LoRA, ORPO)", "[slow]") {
  struct Layout {
    const char* name;
    const char* objective;
    std::vector<std::string> model;     // both runs'
    std::vector<std::string> parallel;  // the 2-process run's
  };
  const std::vector<std::string>& lora = kLora;
  const std::vector<std::string> eval = evaluation_sets();
  for (const Layout& l : std::vector<Layout>{
           {"dp", "dpo", {}, {"train.per_device_batch_size=3"}},
           {"zero2", "dpo", {}, {"train.per_device_batch_size=3", "parallel.zero=2"}},
           // The frozen copy sharded as the policy (rows of the vocabulary head too), then sliced.
           {"zero3", "dpo", {}, {"train.per_device_batch_size=3", "parallel.zero=3"}},
           {"zero3_lora", "dpo", lora, {"train.per_device_batch_size=3", "parallel.zero=3"}},
           {"zero3_orpo", "orpo", {}, {"train.per_device_batch_size=3", "parallel.zero=3"}},
           // Four pairs a step, two per process: the precomputing pass over the 6 pairs runs 2 rounds
           // on each rank, the second rank's last past the pairs (its gathers still met).
           {"zero3_precomputed",
            "dpo",
            {"train.preference.reference=precomputed", "train.per_device_batch_size=4"},
            {"train.per_device_batch_size=2", "parallel.zero=3"}},
           // Two stages: the reference (a copy's stages, the adapters off, or the precomputing pass)
           // through them too; evaluation's rewards from the last stage.
           {"pp", "dpo", eval, {"parallel.pp=2"}},
           {"pp_lora", "dpo", with(lora, eval), {"parallel.pp=2"}},
           {"pp_orpo", "orpo", eval, {"parallel.pp=2"}},
           {"pp_precomputed", "dpo", {"train.preference.reference=precomputed"}, {"parallel.pp=2"}},
           {"tp", "dpo", {}, {"parallel.tp=2"}},
           {"tp_lora", "dpo", lora, {"parallel.tp=2"}},
           {"tp_orpo", "orpo", {}, {"parallel.tp=2"}},
       }) {
    INFO(l.name);
    check_two_processes_as_one(l.objective, l.model, l.parallel);
  }
}

TEST_CASE(
    "preference: 2 processes splitting each sequence (cp) train as one: the shared prompt, two rows, packed, DPO's "
    "copy, LoRA and precomputed reference, ORPO, SimPO, gathering and ring attention",
    "[slow]") {
  const std::vector<std::string>& lora = kLora;
  const std::vector<std::string> eval = evaluation_sets();
  struct Split {
    const char* name;
    const char* objective;
    std::vector<std::string> model;  // both runs'
    const char* method;              // parallel.cp_method of the 2-process run
  };
  for (const Split& c : std::vector<Split>{
           // The completions' branches of a shared prompt reach both methods' masks; evaluation's
           // rewards are whole on every cp rank.
           {"copy", "dpo", eval, "allgather"},
           {"copy_ring", "dpo", {}, "ring"},
           {"two_rows", "dpo", {"data.train.shared_prompt=false"}, "allgather"},
           {"packed", "dpo", {"data.train.pack_pairs=true"}, "ring"},
           {"lora", "dpo", with(lora, eval), "allgather"},
           {"precomputed", "dpo", {"train.preference.reference=precomputed"}, "ring"},
           // ORPO's whole-sequence NLL targets are found before the split, then split as the tokens.
           {"orpo", "orpo", with({"train.preference.beta=0.2"}, eval), "allgather"},
           {"simpo", "simpo", {"train.preference.beta=2"}, "ring"},
       }) {
    INFO(c.name);
    check_two_processes_as_one(c.objective, c.model, {"parallel.cp=2", std::string("parallel.cp_method=") + c.method});
  }
}

TEST_CASE("preference: a resumed DPO run continues the uninterrupted one, its reference the starting weights") {
  const PreferenceData& d = data();
  // Two pairs a step: the data order matters too.
  const std::string recipe = d.recipe("dpo", "checkpoint: {every: 2}\n");
  const std::vector<std::string> sets = {"train.max_steps=4", "train.per_device_batch_size=2"};
  TempDir out;
  REQUIRE(run_recipe(recipe, out.file("straight"), sets).exit_code == 0);
  const CommandResult resumed =
      run_recipe(recipe, out.file("resumed"), with_resume(sets, out.file("straight/checkpoints/step_00000002")));
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  const std::vector<nlohmann::json> straight = step_records(out.file("straight")),
                                    again = step_records(out.file("resumed"));
  REQUIRE(again.size() >= 2);
  // A reference rebuilt from the checkpoint would start the rewards at 0 again.
  for (size_t k = 0; k < 2; ++k) CHECK(again[again.size() - 2 + k] == straight[2 + k]);
}

TEST_CASE("preference: under LoRA the reference is the base with the adapters off") {
  const PreferenceData& d = data();
  const std::string recipe = d.recipe("dpo");
  const std::vector<std::string>& lora = kLora;
  TempDir out;
  const CommandResult adapters = run_recipe(recipe, out.file("auto"), lora);
  INFO(adapters.output);
  REQUIRE(adapters.exit_code == 0);
  CHECK_THAT(adapters.output, Contains("the reference model is the base, adapters off"));
  const CommandResult copy = run_recipe(recipe, out.file("copy"), with(lora, {"train.preference.reference=model"}));
  INFO(copy.output);
  REQUIRE(copy.exit_code == 0);
  CHECK_THAT(copy.output, Contains("a frozen copy of the starting weights"));
  const std::vector<nlohmann::json> a = read_jsonl(out.file("auto/metrics.jsonl")),
                                    b = read_jsonl(out.file("copy/metrics.jsonl"));
  check_same_steps(a, nlohmann::json(b));
  CHECK(a.back()["rewards/margins"].get<double>() > 0.01);  // the adapters trained away from the base
  // QLoRA: the copy's block Linears quantized as the policy's base, the same reference.
  const std::vector<std::string> qlora = with(lora, {"model.quantize.base=nf4"});
  REQUIRE(run_recipe(recipe, out.file("q_auto"), qlora).exit_code == 0);
  const CommandResult q_copy =
      run_recipe(recipe, out.file("q_copy"), with(qlora, {"train.preference.reference=model"}));
  INFO(q_copy.output);
  REQUIRE(q_copy.exit_code == 0);
  CHECK_THAT(q_copy.output, Contains("its block Linears in 4 bits as the policy's"));
  const std::vector<nlohmann::json> qa = read_jsonl(out.file("q_auto/metrics.jsonl"));
  check_same_steps(qa, nlohmann::json(read_jsonl(out.file("q_copy/metrics.jsonl"))));
  // The 4-bit base is not the full-precision one: its rewards differ.
  CHECK(std::abs(qa.front()["logps/chosen"].get<double>() - a.front()["logps/chosen"].get<double>()) > 1e-3);
}

TEST_CASE("preference: recipes that cannot train on pairs stop with exit 2 naming the key") {
  const PreferenceData& d = data();
  const std::string recipe = d.recipe("dpo");
  auto validate = [&](const std::vector<std::string>& sets) {
    std::vector<std::string> args = {"validate", recipe};
    for (const auto& s : sets) args.insert(args.end(), {"--set", s});
    return run_gputrain(args);
  };
  CHECK(validate({}).exit_code == 0);
  struct Bad {
    std::vector<std::string> sets;
    const char* says;
  };
  for (const Bad& bad : std::vector<Bad>{
           {{"train.preference.simpo_gamma=1"},
            "train.preference.simpo_gamma: has no effect with train.objective: dpo"},
           {{"train.preference.label_smoothing=0.1"}, "only robust reads it"},
           {{"train.objective=causal_lm"}, "holds preference pairs"},
           {{"data.train.format=tokens"}, "is not preference"},
           {{"parallel.pp=2", "parallel.pp_microbatches=2"}, "rows are not its pairs"},
           {{"train.per_device_batch_size=auto", "train.global_batch_size=6"}, "the batch finder"},
       }) {
    const CommandResult r = validate(bad.sets);
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Contains(bad.says));
  }
  // The longest pair is 21 tokens in one row (seq_len 20), 17 as prompt + completion (seq_len 16).
  TempDir out;
  const CommandResult one_row = run_recipe(recipe, out.file("run"), {"model.seq_len=18"});
  CHECK(one_row.exit_code == 2);
  CHECK_THAT(one_row.output, Contains("needs model.seq_len 20") && Contains("data.train.shared_prompt: false"));
  const CommandResult two_rows =
      run_recipe(recipe, out.file("run2"), {"model.seq_len=8", "data.train.shared_prompt=false"});
  CHECK(two_rows.exit_code == 2);
  CHECK_THAT(two_rows.output, Contains("needs model.seq_len 16") && Contains("--max-length"));
  CHECK(
      run_recipe(recipe, out.file("run3"), {"model.seq_len=18", "data.train.shared_prompt=false", "train.max_steps=1"})
          .exit_code == 0);
}

TEST_CASE("preference: evaluation in training and gputrain eval report the loss and rewards the next step trains on") {
  const PreferenceData& d = data();
  const std::string recipe = d.recipe("dpo", "checkpoint: {every: 3}\n");
  const std::vector<std::string> sets = {"train.max_steps=4", "data.eval.format=preference",
                                         "data.eval.path=" + d.dir.file("data/train_pairs.bin"), "train.eval_every=3",
                                         "train.eval_steps=2"};
  TempDir out;
  const CommandResult run = run_recipe(recipe, out.file("run"), sets);
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  const std::vector<nlohmann::json> steps = read_jsonl(out.file("run/metrics.jsonl"));
  REQUIRE(steps.size() == 4);
  // Evaluated after step 3's update on every pair: what step 4's forward sees (no dropout).
  const nlohmann::json& at3 = steps[2];
  const nlohmann::json& next = steps[3];
  for (const std::string& key : kCompared) {
    INFO(key);
    const std::string eval_key = key == "loss" ? "eval_loss" : "eval_" + key;
    REQUIRE(at3.contains(eval_key));
    CHECK(at3[eval_key].get<double>() == Approx(next[key].get<double>()).epsilon(1e-5).margin(1e-6));
  }
  // `gputrain eval` of the step-3 checkpoint over the whole set, two pairs a forward.
  const CommandResult eval =
      run_gputrain({"eval", out.file("run/checkpoints/step_00000003"), "--data", d.dir.file("data/train_pairs.bin"),
                    "--batch-size", "2", "--out", out.file("eval.json")});
  INFO(eval.output);
  REQUIRE(eval.exit_code == 0);
  const nlohmann::json e = read_json(out.file("eval.json"));
  CHECK(e["pairs"] == kPairCount);
  CHECK(e["perplexity"].is_null());
  for (const std::string& key : kCompared) {
    INFO(key);
    CHECK(e[key].get<double>() == Approx(next[key].get<double>()).epsilon(1e-5).margin(1e-6));
  }
  // A QLoRA run: `gputrain eval` rebuilds the reference as the 4-bit base training saw.
  const std::vector<std::string> qlora = {"train.max_steps=4", "model.lora.rank=4", "model.quantize.base=nf4",
                                          "optim.lr=0.5"};
  REQUIRE(run_recipe(recipe, out.file("qlora"), qlora).exit_code == 0);
  const CommandResult q_eval = run_gputrain({"eval", out.file("qlora/checkpoints/step_00000003"), "--data",
                                             d.dir.file("data/train_pairs.bin"), "--out", out.file("q_eval.json")});
  INFO(q_eval.output);
  REQUIRE(q_eval.exit_code == 0);
  const nlohmann::json qe = read_json(out.file("q_eval.json"));
  const nlohmann::json q_next = read_jsonl(out.file("qlora/metrics.jsonl"))[3];
  for (const std::string& key : kCompared) {
    INFO("QLoRA " << key);
    CHECK(qe[key].get<double>() == Approx(q_next[key].get<double>()).epsilon(1e-4).margin(1e-5));
  }
  // The report draws the rewards, train and eval, read back at their values (headless Chromium).
  REQUIRE(run_gputrain({"report", out.file("run"), "-o", out.file("report.html")}).exit_code == 0);
  const CommandResult shown = run_python({std::string(GPUTRAIN_SOURCE_DIR) + "/tests/reference/render_report.py",
                                          out.file("report.html"), "", out.file("report.png"), out.file("view.json")});
  INFO(shown.output);
  REQUIRE(shown.exit_code == 0);
  std::set<std::string> drawn;
  const nlohmann::json view = read_json(out.file("view.json"));
  for (const nlohmann::json& p : view["paths"]) {
    drawn.insert(p["key"].get<std::string>());
    if (p["key"] == "rewards/margins")
      CHECK(p["values"].back()[1].get<double>() == Approx(next["rewards/margins"].get<double>()).epsilon(0.05));
  }
  INFO("drawn: " << nlohmann::json(drawn).dump());
  for (const char* key : {"rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies",
                          "eval_rewards/margins", "logps/chosen"})
    CHECK(drawn.count(key) == 1);
  // Pairs are not windows of text, nor text pairs.
  const CommandResult text =
      run_gputrain({"eval", out.file("run"), "--data", reference_tokenizer("mistral/tokenizer.json")});
  CHECK(text.exit_code == 2);
  CHECK_THAT(text.output, Contains("the data is not preference pairs"));
}

TEST_CASE("preference: the configs/ recipes validate and plan within the GPU memory their headers name") {
  for (const char* file : {"dpo-llama3.1-8b-lora-24gb.yaml", "orpo-qwen2.5-7b-lora.yaml"}) {
    INFO(file);
    const std::string path = std::string(GPUTRAIN_SOURCE_DIR) + "/configs/" + file;
    CHECK_THAT(read_file(path), Contains("# memory: 24 GiB"));
    // The base is a download and the pairs are prepared from it (the header says how): planned without.
    const CommandResult plan = run_gputrain({"plan", path, "--set", "model.init_from="});
    INFO(plan.output);
    REQUIRE(plan.exit_code == 0);
    CHECK_THAT(plan.output, Contains("a micro-batch of 1 pairs is one forward of 2 rows"));
    CHECK_THAT(plan.output, !Contains("reference model"));  // LoRA: the base with the adapters off
    const size_t at = plan.output.find("| total (estimate) | ");
    REQUIRE(at != std::string::npos);
    CHECK(std::stod(plan.output.substr(at + 21)) < 24 * 1024);
  }
  // A full fine-tune's DPO holds a frozen copy: the plan counts its weights once more.
  const std::string full = data().recipe("dpo");
  const CommandResult plan = run_gputrain({"plan", full});
  INFO(plan.output);
  REQUIRE(plan.exit_code == 0);
  CHECK_THAT(plan.output, Contains("| reference model | 7.9 |"));
}

TEST_CASE("preference: the loss-spike and NaN guards judge DPO's loss") {
  const PreferenceData& d = data();
  const std::string recipe = d.recipe("dpo");
  TempDir out;
  // Step 12's targets replaced by random ids after the reference saw the real ones: its log-ratios
  // fall far below the steps before.
  const std::vector<std::string> spike_sets = {"train.max_steps=14",   "train.per_device_batch_size=2",
                                               "optim.lr=0.05",        "train.spike_policy=skip",
                                               "train.spike_window=5", "train.spike_threshold=6"};
  std::string command = "GPUTRAIN_POISON_STEPS=12 \"$GPUTRAIN\" run " + shell_quoted(recipe) + " --output-dir " +
                        shell_quoted(out.file("spike"));
  for (const std::string& s : spike_sets) command += " --set " + shell_quoted(s);
  const CommandResult spiked = run_shell(command);
  INFO(spiked.output);
  REQUIRE(spiked.exit_code == 0);
  CHECK_THAT(spiked.output, Contains("step 12"));
  CHECK(read_jsonl(out.file("spike/metrics.jsonl")).back()["spike_skipped_steps"] == 1);

  // A NaN in the starting weights: the policy's and the frozen reference's log-probabilities are NaN.
  fs::copy(d.dir.file("base"), out.file("nan_base"), fs::copy_options::recursive);
  const CommandResult poisoned = run_python({"-c",
                                             "import sys, torch\n"
                                             "from safetensors.torch import load_file, save_file\n"
                                             "w = load_file(sys.argv[1])\n"
                                             "w['model.layers.0.mlp.up_proj.weight'].view(-1)[7] = float('nan')\n"
                                             "save_file(w, sys.argv[1], metadata={'format': 'pt'})\n",
                                             out.file("nan_base/model.safetensors")});
  INFO(poisoned.output);
  REQUIRE(poisoned.exit_code == 0);
  const CommandResult nan = run_recipe(recipe, out.file("nan"), {"model.init_from=" + out.file("nan_base")});
  INFO(nan.output);
  CHECK(nan.exit_code == 1);
  CHECK_THAT(nan.output, Contains("step 1: loss nan"));
  CHECK_THAT(nan.output, Contains("train.nan_policy: skip drops such steps"));
}

TEST_CASE(
    "preference: reference: precomputed stores every pair's reference once, read back on resume, a killed pass "
    "continued, an evaluation set in its own table") {
  const PreferenceData& d = data();
  const std::string recipe = d.recipe("dpo", "checkpoint: {every: 2}\n");
  const std::vector<std::string> sets = {"train.max_steps=4", "train.per_device_batch_size=2"};
  TempDir out;
  REQUIRE(run_recipe(recipe, out.file("live"), sets).exit_code == 0);
  const std::vector<std::string> precomputed = with(sets, {"train.preference.reference=precomputed"});
  // Two steps, then the same folder continued to four: the table is computed once and read back.
  const CommandResult first = run_recipe(recipe, out.file("pre"), with(precomputed, {"train.max_steps=2"}));
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  CHECK_THAT(first.output, Contains("log-probabilities of 6 pairs computed once and stored in"));
  CHECK_THAT(first.output, Contains("precomputed: a frozen copy of the starting weights"));
  CHECK(fs::file_size(out.file("pre/reference_logps/train.bin")) == kPairCount * 2 * 4);
  const CommandResult second = run_recipe(recipe, out.file("pre"), precomputed);
  INFO(second.output);
  REQUIRE(second.exit_code == 0);
  CHECK_THAT(second.output, Contains("log-probabilities of 6 pairs read from"));
  // The same numbers as the reference computed at every step.
  check_same_steps(read_jsonl(out.file("pre/metrics.jsonl")),
                   nlohmann::json(read_jsonl(out.file("live/metrics.jsonl"))));
  // A table of other pairs (its checksum no longer theirs) is computed again, with a warning.
  nlohmann::json facts = read_json(out.file("pre/reference_logps/train.json"));
  facts["pairs_crc32c"] = "00000000";
  write_file(out.file("pre/reference_logps/train.json"), facts.dump());
  const CommandResult third = run_recipe(recipe, out.file("pre"), with(precomputed, {"train.max_steps=5"}));
  INFO(third.output);
  REQUIRE(third.exit_code == 0);
  CHECK_THAT(third.output, Contains("holds the reference log-probabilities of other pairs"));
  CHECK_THAT(third.output, Contains("computed once and stored"));
  // A pass killed after its second round (two pairs a round) goes on from pair 4 when the run starts
  // again in its folder, and trains as the uninterrupted one.
  {
    ArmedFailpoints failpoints("reference.round_done@2=kill");
    const CommandResult killed = run_recipe(recipe, out.file("killed"), precomputed);
    CHECK(killed.exit_code != 0);
    CHECK(read_json(out.file("killed/reference_logps/train.partial.json"))["pairs_done"] == 4);
    CHECK_FALSE(fs::exists(out.file("killed/reference_logps/train.bin")));
  }
  const CommandResult continued = run_recipe(recipe, out.file("killed"), precomputed);
  INFO(continued.output);
  REQUIRE(continued.exit_code == 0);
  CHECK_THAT(continued.output, Contains("the pass over 6 pairs goes on from pair 4"));
  CHECK_FALSE(fs::exists(out.file("killed/reference_logps/train.partial.json")));
  check_same_steps(read_jsonl(out.file("killed/metrics.jsonl")),
                   nlohmann::json(read_jsonl(out.file("live/metrics.jsonl"))));
  // With an evaluation set of other pairs (each pair's completions swapped): its own table, eval.bin,
  // gives the evaluation the frozen copy's numbers (a train table read for it would give other rewards).
  std::string swapped;
  std::stringstream rows(kPairs);
  for (std::string line; std::getline(rows, line);) {
    nlohmann::json row = nlohmann::json::parse(line);
    std::swap(row["chosen"], row["rejected"]);
    swapped += row.dump() + "\n";
  }
  write_file(out.file("swapped.jsonl"), swapped);
  REQUIRE(run_gputrain({"data", "prepare", out.file("swapped.jsonl"), "--format", "preference", "--tokenizer",
                        d.dir.file("base"), "-o", out.file("swapped"), "--val-fraction", "0"})
              .exit_code == 0);
  const std::vector<std::string> eval = {"data.eval.format=preference",
                                         "data.eval.path=" + out.file("swapped/train_pairs.bin"), "train.eval_every=2",
                                         "train.eval_steps=3"};
  REQUIRE(run_recipe(recipe, out.file("eval_live"), with(sets, eval)).exit_code == 0);
  const CommandResult eval_pre = run_recipe(recipe, out.file("eval_pre"), with(precomputed, eval));
  INFO(eval_pre.output);
  REQUIRE(eval_pre.exit_code == 0);
  CHECK(fs::file_size(out.file("eval_pre/reference_logps/eval.bin")) == kPairCount * 2 * 4);
  const std::vector<nlohmann::json> live_lines = read_jsonl(out.file("eval_live/metrics.jsonl"));
  check_same_evaluations(read_jsonl(out.file("eval_pre/metrics.jsonl")), live_lines, with(sets, eval));
  CHECK(live_lines[1]["eval_rewards/margins"].get<double>() < -0.01);  // the swapped pairs: the other way round
  CHECK(live_lines[1]["rewards/margins"].get<double>() > 0.01);
  // Under LoRA: the base's, as the adapters-off reference gives them.
  const std::vector<std::string> lora = {"model.lora.rank=4", "optim.lr=0.5", "train.max_steps=3"};
  REQUIRE(run_recipe(recipe, out.file("lora_live"), lora).exit_code == 0);
  const CommandResult lora_pre =
      run_recipe(recipe, out.file("lora_pre"), with(lora, {"train.preference.reference=precomputed"}));
  INFO(lora_pre.output);
  REQUIRE(lora_pre.exit_code == 0);
  CHECK_THAT(lora_pre.output, Contains("precomputed: the base, adapters off"));
  check_same_steps(read_jsonl(out.file("lora_pre/metrics.jsonl")),
                   nlohmann::json(read_jsonl(out.file("lora_live/metrics.jsonl"))));
}
