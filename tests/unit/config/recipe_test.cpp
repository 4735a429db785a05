// Recipe loading: types, ranges, unknown keys, cross-field rules, extends,
// --set overrides, and the resolved dump. Every error message is checked for
// its position, key and fix, since that message is the user interface.
#include <catch2/catch.hpp>

#include <filesystem>

#include "config/json_schema.h"
#include "config/recipe.h"
#include "config/schema.h"
#include "model/architecture.h"
#include "objective/objectives.h"
#include "optim/optimizer_specs.h"
#include "test_util.h"
#include "util/error.h"

using namespace gputrain;
using Catch::Matchers::Contains;
using gputrain::test::TempDir;
using gputrain::test::write_file;

namespace {

// A small valid recipe; `model_extra` is appended inside the model mapping.
std::string minimal(const std::string& model_extra = "") {
  return "run: {name: t}\n"
         "data:\n"
         "  train: {format: synthetic, synthetic: {vocab: 16}}\n"
         "model: {vocab_size: 64, seq_len: 16, n_layer: 1, d_model: 16, n_head: 2" +
         (model_extra.empty() ? "" : ", " + model_extra) + "}\n";
}
const std::string kMinimal = minimal();

// Loads `text` as recipe.yaml in a temp dir; returns the error message ("" if none).
std::string load_error(const std::string& text, const std::vector<std::string>& overrides = {}) {
  TempDir dir;
  write_file(dir.file("recipe.yaml"), text);
  try {
    load_recipe(dir.file("recipe.yaml"), overrides, recipe_rules());
  } catch (const Error& e) {
    CHECK(exit_code_for(e.kind()) == 2);
    return std::string(e.what());
  }
  return "";
}

Recipe load_text(const std::string& text, const std::vector<std::string>& overrides = {}) {
  TempDir dir;
  write_file(dir.file("recipe.yaml"), text);
  return load_recipe(dir.file("recipe.yaml"), overrides, recipe_rules());
}

}  // namespace

TEST_CASE("a minimal recipe loads with defaults filled in", "[config]") {
  Recipe r = load_text(kMinimal);
  CHECK(r.settings.run.name == "t");
  CHECK(r.settings.model.d_model == 16);
  CHECK(r.settings.optim.lr == Approx(6e-4));  // default
  CHECK(r.settings.data.train.format == DataFormat::kSynthetic);
  CHECK(r.settings.resolved_output_dir() == "runs/t");
  CHECK(r.origins.at("model.d_model").line == 4);
  CHECK(r.origins.at("optim.lr").is_default());
}

TEST_CASE("YAML syntax errors name file, line and column", "[config]") {
  std::string e = load_error("run:\n  name: [unclosed\n");
  CHECK_THAT(e, Contains("recipe.yaml:"));
  CHECK_THAT(e, Contains("YAML syntax error"));
}

TEST_CASE("a recipe that is a list or a scalar says what a recipe is and how to write one", "[config]") {
  for (const std::string text : {"- model\n- train\n", "just some words\n"}) {
    INFO(text);
    const std::string e = load_error(text);
    CHECK_THAT(e, Contains("recipe.yaml:1:1: a recipe must be a mapping of sections"));
    CHECK_THAT(e, Contains("fix: start lines at the top level with a section name"));
  }
}

TEST_CASE("unknown keys are errors with a suggestion", "[config]") {
  std::string e =
      load_error(kMinimal + "optim: {learning_rate: 0.1, betas: [0.9, 0.99], lr: 1e-3}\ntrain: {max_step: 10}\n");
  CHECK_THAT(e, Contains("recipe.yaml:5:9: optim.learning_rate: unknown key"));
  CHECK_THAT(e, Contains("recipe.yaml:6:9: train.max_step: unknown key"));
  CHECK_THAT(e, Contains("did you mean 'train.max_steps'?"));
  CHECK_THAT(e, Contains("2 problems"));  // all problems reported in one go
}

TEST_CASE("a key in the wrong section points to the right one", "[config]") {
  std::string e = load_error(kMinimal + "train: {lr: 0.1}\n");
  CHECK_THAT(e, Contains("train.lr: unknown key"));
  CHECK_THAT(e, Contains("did you mean 'optim.lr'?"));
}

TEST_CASE("unknown top-level sections are errors", "[config]") {
  std::string e = load_error(kMinimal + "optimizer: {lr: 0.1}\n");
  CHECK_THAT(e, Contains("optimizer: unknown key"));
  CHECK_THAT(e, Contains("did you mean 'optim'?"));
}

TEST_CASE("wrong types are errors with the value and the expected type", "[config]") {
  std::string e = load_error(minimal("bias: maybe") + "train: {max_steps: ten, max_grad_norm: big}\n");
  CHECK_THAT(e, Contains("train.max_steps: expected a whole number, got 'ten'"));
  CHECK_THAT(e, Contains("train.max_grad_norm: expected a number, got 'big'"));
  CHECK_THAT(e, Contains("model.bias: expected true or false, got 'maybe'"));
}

TEST_CASE("a section given a scalar is an error", "[config]") {
  std::string e = load_error(kMinimal + "train: 5\n");
  CHECK_THAT(e, Contains("train: is a section, so it needs keys"));
  CHECK_THAT(e, Contains("e.g. train: {"));
  CHECK_THAT(load_error(kMinimal + "checkpoint: 5\n"), Contains("e.g. checkpoint: {"));
  CHECK_THAT(load_error(kMinimal + "checkpoint: {evry: 5}\n"),
             Contains("checkpoint.evry: unknown key\n    fix: did you mean 'checkpoint.every'?"));
  CHECK(load_error(kMinimal + "checkpoint: {}\n").empty());
}

TEST_CASE("out-of-range values are errors naming the range", "[config]") {
  std::string e = load_error(minimal("dropout: 1.5") + "train: {max_steps: 0}\noptim: {lr: -1}\n");
  CHECK_THAT(e, Contains("train.max_steps: must be >= 1, got 0"));
  CHECK_THAT(e, Contains("model.dropout: must be >= 0.0 and < 1.0, got 1.5"));
  CHECK_THAT(e, Contains("optim.lr: must be > 0.0 and <= 10.0, got -1"));
}

TEST_CASE("enum values are checked with a suggestion", "[config]") {
  std::string e = load_error(kMinimal + "optim: {schedule: {name: cosin}}\n");
  CHECK_THAT(e, Contains("optim.schedule.name: 'cosin' is not one of constant | cosine | linear"));
  CHECK_THAT(e, Contains("did you mean 'cosine'?"));
}

TEST_CASE("lists must have the right length", "[config]") {
  std::string e = load_error(kMinimal + "optim: {betas: [0.9]}\n");
  CHECK_THAT(e, Contains("optim.betas: expected a list of two numbers"));
}

TEST_CASE("duplicate keys are errors", "[config]") {
  std::string e = load_error("run: {name: a}\nrun: {name: b}\n");
  CHECK_THAT(e, Contains("key 'run' appears twice"));
}

TEST_CASE("cross-field: n_head must divide d_model, at n_head's position", "[config]") {
  std::string e = load_error(minimal() + "parallel: {dp: 1}\n", {});
  CHECK(e.empty());
  TempDir dir;
  write_file(dir.file("recipe.yaml"),
             "run: {name: t}\ndata: {train: {format: synthetic, synthetic: {vocab: 16}}}\n"
             "model: {vocab_size: 64, seq_len: 16, n_layer: 1, d_model: 16,\n"
             "        n_head: 3}\n");
  e = gputrain::test::recipe_error(dir.file("recipe.yaml"));
  CHECK_THAT(e, Contains("recipe.yaml:4:17: model.n_head: (3) must divide model.d_model (16)"));
  CHECK_THAT(e, Contains("fix: pick n_head among 1, 2, 4, 8, 16"));
}

TEST_CASE("cross-field: evaluation cadence needs eval data", "[config]") {
  std::string e = load_error(kMinimal + "train: {eval_every: 10}\n");
  CHECK_THAT(e, Contains("train.eval_every: is 10 but data.eval is not set"));
}

TEST_CASE("cross-field: training needs data", "[config]") {
  std::string e = load_error("model: {vocab_size: 64, seq_len: 8, n_layer: 1, n_head: 1, d_model: 8}\n");
  CHECK_THAT(e, Contains("data.train.format: is none, but training needs data"));
}

TEST_CASE("cross-field: tensor and pipeline degrees must fit the model", "[config]") {
  // kMinimal's model: 1 layer, 2 heads, d_model 16 (MLP width 64).
  CHECK_THAT(load_error(kMinimal + "parallel: {tp: 3}\n"), Contains("parallel.tp: (3) must divide model.n_head (2)"));
  CHECK_THAT(load_error(kMinimal + "parallel: {tp: 3}\n"), Contains("fix: use one of 1, 2"));
  CHECK(load_error(kMinimal + "parallel: {tp: 2}\n").empty());
  CHECK_THAT(load_error(kMinimal + "parallel: {pp: 4}\n"), Contains("parallel.pp: (4) exceeds model.n_layer (1)"));
  CHECK_THAT(load_error(kMinimal + "parallel: {pp: 2, pp_microbatches: 3}\ntrain: {per_device_batch_size: 4}\n",
                        {"model.n_layer=2"}),
             Contains("parallel.pp_microbatches: (3) must divide the"));
  CHECK_THAT(load_error(kMinimal + "parallel: {zero: 4}\n"), Contains("parallel.zero"));
  CHECK_THAT(load_error(kMinimal + "parallel: {pp_schedule: interleaved}\n"), Contains("parallel.pp_schedule"));
  CHECK(load_error(kMinimal + "parallel: {pp: 1, tp: 1, pp_schedule: gpipe}\n").empty());
  // Expert parallelism needs experts and a degree that divides them and the dp degree; ZeRO combines with it.
  CHECK_THAT(load_error(kMinimal + "parallel: {ep: 2}\n"),
             Contains("parallel.ep: (2) splits mixture-of-experts layers, and this model has none"));
  const std::vector<std::string> experts = {"model.moe.experts=4", "model.moe.top_k=1"};
  CHECK(load_error(kMinimal + "parallel: {ep: 2}\n", experts).empty());
  CHECK_THAT(load_error(kMinimal + "parallel: {ep: 3}\n", experts), Contains("fix: use one of 1, 2, 4"));
  CHECK_THAT(load_error(kMinimal + "parallel: {ep: 2, dp: 3}\n", experts),
             Contains("parallel.ep: (2) must divide parallel.dp (3)"));
  CHECK(load_error(kMinimal + "parallel: {ep: 2, zero: 2}\n", experts).empty());
}

TEST_CASE("kernels.cuda_graphs refuses what a captured step cannot replay, and warns on the CPU", "[config]") {
  const std::string on = kMinimal + "kernels: {cuda_graphs: true}\n";
  CHECK(load_error(on).empty());
  CHECK_THAT(load_error(on, {"model.moe.experts=4", "model.moe.top_k=1"}),
             Contains("kernels.cuda_graphs: cannot capture a mixture-of-experts step"));
  // Checkpointing's recomputation is captured where it draws no random numbers (no dropout).
  CHECK(load_error(on, {"train.gradient_checkpointing=full", "model.dropout=0"}).empty());
  CHECK_THAT(load_error(on, {"train.gradient_checkpointing=selective", "model.dropout=0.1"}),
             Contains("fix: set the dropout to 0, train.gradient_checkpointing: none, or kernels.cuda_graphs: false"));
  CHECK_THAT(load_error(on, {"train.gradient_checkpointing=full", "model.lora.rank=4", "model.lora.dropout=0.05"}),
             Contains("while model.dropout or model.lora.dropout is above 0"));
  CHECK(load_error(on, {"model.dropout=0.1"}).empty());
  for (const char* split : {"parallel.dp=2", "parallel.tp=2", "parallel.pp=2"}) {
    INFO(split);
    CHECK_THAT(load_error(on, {split, "model.n_layer=2"}),
               Contains("kernels.cuda_graphs: captures the step of a single process"));
  }
  CHECK(load_error(on, {"parallel.dp=1", "parallel.tp=1"}).empty());
  CHECK_THAT(load_error(kMinimal + "kernels: {cuda_graph: true}\n"), Contains("did you mean 'kernels.cuda_graphs'?"));
  std::string warnings;
  for (const auto& w : load_text(on, {"run.device=cpu"}).warnings) warnings += w.str() + "\n";
  CHECK_THAT(warnings, Contains("kernels.cuda_graphs: has no effect when training on the CPU"));
  CHECK(load_text(on).settings.kernels.cuda_graphs);
  CHECK_FALSE(load_text(kMinimal).settings.kernels.cuda_graphs);
}

TEST_CASE("model.arch llama: bias and tie_embeddings default to false unless set, its keys are checked",
          "[config][llama]") {
  const Settings llama = load_text(minimal("arch: llama")).settings;
  CHECK(llama.model.arch == ModelArch::kLlama);
  CHECK_FALSE(llama.model.bias);
  CHECK_FALSE(llama.model.tie_embeddings);
  const Settings set = load_text(minimal("arch: llama, bias: true, tie_embeddings: true")).settings;
  CHECK(set.model.bias);
  CHECK(set.model.tie_embeddings);
  CHECK(load_text(kMinimal).settings.model.bias);  // gpt keeps GPT-2's
  // The resolved recipe (what a checkpoint saves) reads back to the same settings.
  CHECK(recipe_to_json(load_text(recipe_to_yaml(llama)).settings) == recipe_to_json(llama));
  CHECK(load_text(minimal("arch: llama"), {"model.bias=true"}).settings.model.bias);

  CHECK_THAT(load_error(minimal("n_kv_head: 1")),
             Contains("model.n_kv_head: grouped-query attention is part of arch llama"));
  CHECK_THAT(load_error(minimal("arch: llama"), {"model.n_head=4", "model.n_kv_head=3"}),
             Contains("model.n_kv_head: (3) must divide model.n_head (4)"));
  CHECK(load_error(minimal("arch: llama"), {"model.n_head=4", "model.n_kv_head=2"}).empty());
  CHECK_THAT(load_error(minimal("arch: llama"), {"model.n_head=16"}),
             Contains("rotary position embeddings") && Contains("even"));
  CHECK_THAT(load_error(minimal("arch: llama") + "parallel: {tp: 2}\n", {"model.n_head=4", "model.n_kv_head=1"}),
             Contains("parallel.tp: (2) must divide model.n_kv_head (1)"));
  CHECK(load_error(minimal("arch: llama") + "parallel: {tp: 2}\n", {"model.n_head=4", "model.n_kv_head=2"}).empty());
  CHECK_THAT(load_error(minimal("arch: llam")), Contains("did you mean 'llama'"));
  // mlp_ratio need not give a whole number for llama (its width is rounded) or with mlp_width set.
  CHECK(load_error(minimal("arch: llama, mlp_ratio: 2.7")).empty());
  CHECK(load_error(minimal("mlp_ratio: 2.7, mlp_width: 40")).empty());
  CHECK_THAT(load_error(minimal("mlp_ratio: 2.7")), Contains("model.mlp_width"));
}

TEST_CASE("data paths are checked where the recipe names them", "[config]") {
  TempDir dir;
  std::filesystem::create_directories(dir.path() / "adir");
  const std::string base = "model: {vocab_size: 300, seq_len: 16, n_layer: 1, n_head: 1, d_model: 8}\n";
  write_file(dir.file("r1.yaml"), base + "data: {train: {format: tokens, path: missing.bin}}\n");
  write_file(dir.file("r2.yaml"), base + "data: {train: {format: tokens, path: adir}}\n");
  write_file(dir.file("r3.yaml"), base + "data: {train: {format: tokens, path: []}}\n");
  write_file(dir.file("r4.yaml"), base + "data: {train: {format: tokens, path: x_*.bin, eot_token: 300}}\n");
  write_file(dir.file("r5.yaml"), base + "data: {train: {format: text, path: x.txt, packing: documents}}\n");
  auto err = [&](const std::string& f) { return gputrain::test::recipe_error(dir.file(f)); };
  CHECK_THAT(err("r1.yaml"), Contains("r1.yaml:2:"));
  CHECK_THAT(err("r1.yaml"), Contains("data.train.path: file '" + dir.file("missing.bin") + "' does not exist"));
  CHECK_THAT(err("r2.yaml"), Contains("is a directory, not a data file"));
  CHECK_THAT(err("r2.yaml"), Contains("fix: name the files, e.g. " + dir.file("adir/train_*.bin")));
  CHECK_THAT(err("r3.yaml"), Contains("data.train.path: is an empty list"));
  CHECK_THAT(err("r4.yaml"), Contains("data.train.eot_token: (300) is not below model.vocab_size (300)"));
  CHECK_THAT(err("r5.yaml"), Contains("need token shards with end-of-document tokens"));
}

TEST_CASE("data.path takes a list of files and globs, each relative to its recipe", "[config]") {
  TempDir dir;
  write_file(dir.file("a.bin"), "xx");
  write_file(dir.file("r.yaml"),
             "model: {vocab_size: 300, seq_len: 16, n_layer: 1, n_head: 1, d_model: 8}\n"
             "data: {train: {format: tokens, path: [a.bin, 'shards/train_*.bin'], eot_token: 7}}\n");
  Recipe r = load_recipe(dir.file("r.yaml"), {}, recipe_rules());
  CHECK(r.settings.data.train.paths == std::vector<std::string>{dir.file("a.bin"), dir.file("shards/train_*.bin")});
  CHECK(r.settings.data.train.eot_token == 7);
  CHECK(r.settings.data.eval.eot_token == -1);
  const std::string yaml = recipe_to_yaml(r.settings);
  CHECK_THAT(yaml, Contains("eot_token: auto"));
  // The dump loads back to the same settings (lists stay lists, one path stays a string).
  write_file(dir.file("dump.yaml"), yaml);
  CHECK(recipe_hash(load_recipe(dir.file("dump.yaml"), {}, recipe_rules()).settings) == recipe_hash(r.settings));
}

TEST_CASE("data paths are relative to the recipe file", "[config]") {
  TempDir dir;
  std::filesystem::create_directories(dir.path() / "sub");
  write_file(dir.file("sub/corpus.txt"), std::string(100, 'x'));
  write_file(dir.file("sub/r.yaml"),
             "model: {vocab_size: 256, seq_len: 8, n_layer: 1, n_head: 1, d_model: 8}\n"
             "data: {train: {format: text, path: corpus.txt}}\n");
  Recipe r = load_recipe(dir.file("sub/r.yaml"), {}, recipe_rules());
  CHECK(r.settings.data.train.paths == std::vector<std::string>{dir.file("sub/corpus.txt")});
}

TEST_CASE("extends merges bases under the recipe, in order", "[config]") {
  TempDir dir;
  write_file(dir.file("a.yaml"), kMinimal + "optim: {lr: 1e-3, eps: 1e-6}\ntrain: {max_steps: 5}\n");
  write_file(dir.file("b.yaml"), "optim: {lr: 2e-3}\n");
  write_file(dir.file("r.yaml"), "extends: [a.yaml, b.yaml]\ntrain: {max_steps: 7}\n");
  Recipe r = load_recipe(dir.file("r.yaml"), {"optim.eps=1e-7"}, recipe_rules());
  CHECK(r.settings.optim.lr == Approx(2e-3));   // b over a
  CHECK(r.settings.train.max_steps == 7);       // recipe over bases
  CHECK(r.settings.optim.eps == Approx(1e-7));  // --set over everything
  CHECK(r.settings.model.d_model == 16);        // from a
  CHECK(r.files.size() == 3);
  CHECK_THAT(r.origins.at("optim.lr").str(), Contains("b.yaml:1:"));

  write_file(dir.file("single.yaml"), "extends: a.yaml\n");
  CHECK(load_recipe(dir.file("single.yaml"), {}, recipe_rules()).settings.train.max_steps == 5);
}

TEST_CASE("extends errors: missing base and cycles", "[config]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), "extends: nope.yaml\n");
  write_file(dir.file("c1.yaml"), "extends: c2.yaml\n");
  write_file(dir.file("c2.yaml"), "extends: c1.yaml\n");
  auto err = [&](const std::string& f) { return gputrain::test::recipe_error(dir.file(f)); };
  CHECK_THAT(err("r.yaml"), Contains("r.yaml:1:10: extends: base recipe"));
  CHECK_THAT(err("r.yaml"), Contains("does not exist"));
  CHECK_THAT(err("c1.yaml"), Contains("extends itself"));
}

TEST_CASE("overrides from --set are typed and checked like the file", "[config]") {
  Recipe r = load_text(kMinimal, {"optim.lr=3e-4", "optim.betas=[0.8, 0.9]", "train.max_steps=200",
                                  "data.eval={format: synthetic, synthetic: {vocab: 16}}"});
  CHECK(r.settings.optim.lr == Approx(3e-4));
  CHECK(r.settings.optim.betas[0] == Approx(0.8));
  CHECK(r.settings.train.max_steps == 200);
  CHECK(r.settings.data.eval.format == DataFormat::kSynthetic);
  CHECK(r.origins.at("optim.lr").file == "--set optim.lr=3e-4");

  CHECK_THAT(load_error(kMinimal, {"optim.lr=fast"}), Contains("--set optim.lr=fast: optim.lr: expected a number"));
  CHECK_THAT(load_error(kMinimal, {"optim.lrr=1"}), Contains("optim.lrr: unknown key"));
  CHECK_THAT(load_error(kMinimal, {"optim.lr"}), Contains("expected KEY=VALUE"));
  CHECK_THAT(load_error(kMinimal, {"run.name.x=1"}), Contains("holds a value, not a section"));
}

TEST_CASE("the resolved recipe round-trips through YAML and JSON", "[config]") {
  Recipe r = load_text(kMinimal, {"optim.lr=3e-4", "run.threads=2"});
  TempDir dir;
  write_file(dir.file("resolved.yaml"), recipe_to_yaml(r.settings));
  Recipe again = load_recipe(dir.file("resolved.yaml"), {}, recipe_rules());
  CHECK(recipe_to_json(again.settings) == recipe_to_json(r.settings));
  CHECK(recipe_hash(again.settings) == recipe_hash(r.settings));
  CHECK_THAT(recipe_to_yaml(r.settings), Contains("lr: 3e-04"));
  CHECK_THAT(recipe_to_json(r.settings), Contains("\"threads\": 2"));
  CHECK(recipe_hash(load_text(kMinimal, {"optim.lr=1e-4"}).settings) != recipe_hash(r.settings));
}

TEST_CASE("every recipe in configs/ validates", "[config]") {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(GPUTRAIN_SOURCE_DIR) + "/configs")) {
    if (entry.path().extension() != ".yaml") continue;
    INFO(entry.path().string());
    // A fine-tuning recipe names a base made by another recipe first (its header says how):
    // the only error allowed is that base's absence, and with it supplied the recipe loads.
    std::string problem;
    try {
      load_recipe(entry.path().string(), {}, recipe_rules());
    } catch (const Error& e) {
      problem = e.what();
    }
    if (problem.find("model.init_from") != std::string::npos && problem.find("does not exist") != std::string::npos) {
      // (another recipe's export, or a Hub download)
      const std::string header = test::read_file(entry.path().string());
      CHECK((header.find("gputrain export") != std::string::npos || header.find("hf download") != std::string::npos));
      // The base as `gputrain export` writes it: its config.json agrees with the recipe's model keys.
      TempDir base;
      const Settings without = load_recipe(entry.path().string(), {"model.init_from="}, recipe_rules()).settings;
      test::write_file(base.file("config.json"), architecture(without.model).hf.config(without.model).dump());
      CHECK_NOTHROW(load_recipe(entry.path().string(), {"model.init_from=" + base.path().string()}, recipe_rules()));
    } else {
      CHECK(problem.empty());
    }
    ++count;
  }
  CHECK(count >= 3);
}

TEST_CASE("the built-in quickstart is configs/quickstart.yaml", "[config]") {
  Recipe builtin = load_recipe("", {}, recipe_rules());
  Recipe file = load_recipe(std::string(GPUTRAIN_SOURCE_DIR) + "/configs/quickstart.yaml", {}, recipe_rules());
  CHECK(recipe_to_json(builtin.settings) == recipe_to_json(file.settings));
  CHECK(builtin.source == kBuiltinQuickstartName);
}

TEST_CASE("docs/recipe-reference.md is what print-config --reference prints", "[config]") {
  const std::string page = gputrain::test::read_file(std::string(GPUTRAIN_SOURCE_DIR) + "/docs/recipe-reference.md");
  INFO("regenerate with: build/gputrain print-config --reference > docs/recipe-reference.md");
  CHECK(page == schema_reference_markdown());
  CHECK(page.find("| `optim.lr` |") != std::string::npos);  // every section's keys, not only a title
  CHECK(page.find("\n## metrics\n") != std::string::npos);
}

TEST_CASE("docs/recipe.schema.json is what print-config --schema prints, a key typed as validation reads it",
          "[config]") {
  const std::string file = gputrain::test::read_file(std::string(GPUTRAIN_SOURCE_DIR) + "/docs/recipe.schema.json");
  INFO("regenerate with: build/gputrain print-config --schema > docs/recipe.schema.json");
  const auto schema = recipe_json_schema();
  CHECK(file == schema.dump(2) + "\n");
  CHECK(schema["$schema"] == "https://json-schema.org/draft/2020-12/schema");
  CHECK(schema["additionalProperties"] == false);
  const auto& optim = schema["properties"]["optim"];
  CHECK(optim["additionalProperties"] == false);
  CHECK(optim["properties"]["lr"]["type"] == "number");
  CHECK(optim["properties"]["lr"]["default"] == settings_to_json(Settings{})["optim"]["lr"]);
  CHECK(optim["properties"]["name"]["enum"].size() == optimizer_specs().size());  // one word per registered optimizer
  const auto& zero = schema["properties"]["parallel"]["properties"]["zero"];
  CHECK(zero["minimum"] == 0);
  CHECK(zero["maximum"] == 3);
  CHECK(schema["properties"].contains("extends"));
}

TEST_CASE("precision, checkpointing and batch keys are typed and cross-checked", "[config]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), kMinimal +
                                     "precision: {mode: fp16, loss_scale: dynamic, growth_interval: 100}\n"
                                     "train: {gradient_checkpointing: selective, checkpoint_every: 3, "
                                     "per_device_batch_size: auto, global_batch_size: 64}\n");
  Recipe r = load_recipe(dir.file("r.yaml"), {}, recipe_rules());
  CHECK(r.settings.precision.mode == PrecisionMode::kFp16);
  CHECK(r.settings.precision.loss_scale == 0);
  CHECK(r.settings.train.gradient_checkpointing == CheckpointingPolicy::kSelective);
  CHECK(r.settings.train.per_device_batch_size == 0);
  CHECK_THAT(recipe_to_yaml(r.settings), Contains("loss_scale: dynamic"));
  CHECK_THAT(gputrain::test::recipe_error(dir.file("r.yaml"), {"precision.mode=fp8"}), Contains("'fp8' is not one of"));
  CHECK_THAT(gputrain::test::recipe_error(dir.file("r.yaml"), {"train.global_batch_size=0"}),
             Contains("set train.global_batch_size"));
  CHECK_THAT(gputrain::test::recipe_error(
                 dir.file("r.yaml"), {"train.per_device_batch_size=8", "train.grad_accum_steps=2", "parallel.dp=1"}),
             Contains("train.global_batch_size: (64) is not per_device_batch_size x grad_accum_steps (16)"));
  CHECK_THAT(
      gputrain::test::recipe_error(dir.file("r.yaml"),
                                   {"train.per_device_batch_size=8", "train.grad_accum_steps=2", "parallel.dp=2"}),
      Contains("train.global_batch_size: (64) is not per_device_batch_size x grad_accum_steps x parallel.dp (32)"));
  // dp auto: 64 = 16 x 4 processes could be right; 60 cannot be.
  CHECK(gputrain::test::recipe_error(dir.file("r.yaml"),
                                     {"train.per_device_batch_size=8", "train.grad_accum_steps=2"}) == "");
  CHECK_THAT(
      gputrain::test::recipe_error(dir.file("r.yaml"), {"train.per_device_batch_size=8", "train.grad_accum_steps=2",
                                                        "train.global_batch_size=60"}),
      Contains("(60) is not per_device_batch_size x grad_accum_steps (16) x a number of processes"));
  // Shapes that miss tensor cores are warnings with the fix.
  Recipe odd = load_recipe(dir.file("r.yaml"), {"model.vocab_size=50257", "model.d_model=100", "model.n_head=4"},
                           recipe_rules());
  std::string all;
  for (const auto& w : odd.warnings) all += w.str() + "\n";
  CHECK_THAT(all, Contains("model.vocab_size: (50257 embedding rows) is not a multiple of 8"));
  CHECK_THAT(all, Contains("pad_vocab_to_multiple_of: 64"));
  CHECK_THAT(all, Contains("model.d_model: (100) is not a multiple of 8"));
  CHECK_THAT(all, Contains("head dimension of 25"));
  Recipe padded =
      load_recipe(dir.file("r.yaml"), {"model.vocab_size=50257", "model.pad_vocab_to_multiple_of=64"}, recipe_rules());
  for (const auto& w : padded.warnings) CHECK_THAT(w.str(), !Contains("model.vocab_size"));
}
