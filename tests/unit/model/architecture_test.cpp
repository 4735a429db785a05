// The architecture table (model/architecture.h): it and model.arch's enum in the schema name the
// same architectures in the same order, each Hugging Face model_type belongs to one, the defaults
// it gives the recipe apply only where the recipe is silent, and the model built for each has the
// norm, MLP and positions its Architecture says.
#include <catch2/catch.hpp>

#include <set>
#include <string>

#include "config/schema.h"
#include "model/architecture.h"
#include "model/gpt.h"
#include "model/gpt_shapes.h"
#include "test_util.h"

using namespace gputrain;

TEST_CASE("architectures: the table and model.arch's enum name the same ones, in order", "[model][arch]") {
  const FieldSpec* field = find_field("model.arch");
  REQUIRE(field != nullptr);
  std::string listed;
  for (const Architecture* a : architectures()) {
    listed += std::string(listed.empty() ? "" : " | ") + a->name;
    Settings s;
    s.model.arch = a->id;
    CHECK(field->write(s) == a->name);  // the schema's YAML name of the id is the architecture's name
    CHECK(&architecture(a->id) == a);
  }
  CHECK(field->type == listed);
  std::set<std::string> hf_types;
  for (const Architecture* a : architectures()) {
    CHECK(hf_types.insert(a->hf.model_type).second);
    CHECK(architecture_of_hf_model_type(a->hf.model_type) == a);
  }
  CHECK(architecture_of_hf_model_type("gemma") == nullptr);
}

TEST_CASE("architectures: their defaults fill only the keys the recipe leaves out", "[model][arch]") {
  for (const Architecture* a : architectures()) {
    ModelSettings m;
    m.arch = a->id;
    m.bias = !a->default_bias;
    m.tie_embeddings = !a->default_tie_embeddings;
    architecture_rules().apply_defaults(m, [](const std::string&) { return false; });
    CHECK(m.bias == a->default_bias);
    CHECK(m.tie_embeddings == a->default_tie_embeddings);
    m.bias = !a->default_bias;
    architecture_rules().apply_defaults(m, [](const std::string& key) { return key == "model.bias"; });
    CHECK(m.bias == !a->default_bias);
  }
}

TEST_CASE("architectures: the model built for each has the norm, MLP and positions it names", "[model][arch]") {
  for (const Architecture* a : architectures()) {
    INFO(a->name);
    ModelSettings m = test::model_settings(64, 8, 2, 4, 32);
    m.arch = a->id;
    m.bias = a->default_bias;
    m.tie_embeddings = a->default_tie_embeddings;
    Gpt model(m);
    auto* block = (*model->transformer->h)[0]->as<Block>();
    CHECK(block->ln_1->kind == a->norm);
    CHECK(block->ln_1->bias.defined() == a->norm_has_bias());
    CHECK(static_cast<bool>(model->transformer->wpe) == (a->positions == PositionKind::kLearned));
    CHECK(static_cast<bool>(block->attn->rotary) == (a->positions == PositionKind::kRotary));
    CHECK(block->mlp->swiglu == (a->mlp == MlpKind::kSwiGlu));
    CHECK(block->mlp->c_fc->weight.size(0) == a->mlp_fc_rows(mlp_hidden(m)));
    CHECK(static_cast<bool>(model->lm_head) == !m.tie_embeddings);
    // The settings-only shape list (memory plan, FLOPs) agrees with the module.
    int64_t listed = 0;
    for (const ParamShape& p : gpt_parameter_shapes(m)) listed += p.numel();
    CHECK(listed == model->parameter_count());
  }
}

TEST_CASE("architectures: each refuses the keys it has no use for, and the rotary keys are checked", "[model][arch]") {
  test::TempDir dir;
  const std::string recipe = dir.file("r.yaml");
  test::write_file(recipe,
                   "model: {vocab_size: 64, seq_len: 32, n_layer: 1, n_head: 4, d_model: 32}\n"
                   "data: {train: {format: synthetic}}\n");
  const auto error_of = [&](const std::vector<std::string>& sets) { return test::recipe_error(recipe, sets); };
  using Catch::Matchers::Contains;
  // GPT-2 has none of the rotary architectures' keys.
  for (const char* set : {"model.sliding_window=8", "model.rope_scaling.type=linear", "model.max_positions=64",
                          "model.attention_bias=true", "model.head_dim=16"})
    CHECK_THAT(error_of({set}), Contains("is not part of arch gpt"));
  CHECK_THAT(error_of({"model.arch=llama", "model.sliding_window=8"}), Contains("set model.arch: mistral"));
  CHECK(error_of({"model.arch=mistral", "model.sliding_window=8"}).empty());
  CHECK_THAT(error_of({"model.arch=qwen2", "model.bias=true"}), Contains("qwen2's biases are fixed"));
  CHECK_THAT(error_of({"model.arch=llama", "model.max_positions=16"}),
             Contains("model.seq_len: (32) is longer than model.max_positions (16)"));
  CHECK_THAT(error_of({"model.arch=llama", "model.rope_scaling.type=llama3"}),
             Contains("model.rope_scaling.original_max_positions"));
  // An explicit head width need not divide d_model (Mistral Nemo: 32 heads of 128 on 5120).
  CHECK(error_of({"model.arch=llama", "model.n_head=3", "model.head_dim=16"}).empty());
  CHECK_THAT(error_of({"model.n_head=3"}), Contains("must divide model.d_model"));
}
