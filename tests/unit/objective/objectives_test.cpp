// The objective registry (objective/objectives.h): one spec per train.objective value, docs/training.md's
// table printed from them, and the causal LM's loss against LibTorch's cross-entropy on the model's logits,
// through the whole model and from the last block's stream (a pipeline's last stage).
#include <catch2/catch.hpp>
#include <torch/nn/functional/loss.h>

#include <set>

#include "config/schema.h"
#include "objective/objectives.h"
#include "test_util.h"
#include "util/ignore_index.h"

using namespace gputrain;
using Catch::Matchers::Contains;

TEST_CASE("objective specs: one per train.objective value, each complete", "[objective]") {
  const FieldSpec* field = find_field("train.objective");
  REQUIRE(field);
  std::set<std::string> named, specced;
  for (const auto& n : field->value_schema.at("enum")) named.insert(n.get<std::string>());
  for (const ObjectiveSpec* spec : objective_specs()) {
    const std::string n = objective_name(spec->name);
    INFO(n);
    CHECK(specced.insert(n).second);  // registered once
    CHECK(&objective_spec(spec->name) == spec);
    CHECK_FALSE(spec->summary.empty());
    // (No stream loss: the objective's recipe rules refuse a pipeline, tested with each objective.)
    CHECK((spec->units && spec->loss_sum));
  }
  named.erase("lm");  // causal_lm's other name
  CHECK(specced == named);
  CHECK(&default_objective() == &objective_spec(TrainSettings{}.objective));
}

TEST_CASE("docs/training.md's objective table is what the specs print", "[objective]") {
  const std::string page = test::read_file(std::string(GPUTRAIN_SOURCE_DIR) + "/docs/training.md");
  INFO("put objective_table_markdown() into docs/training.md's Objectives section:\n" << objective_table_markdown());
  CHECK(page.find(objective_table_markdown()) != std::string::npos);
}

TEST_CASE("causal_lm: the summed cross-entropy of the model's logits over the unmasked targets", "[objective]") {
  torch::manual_seed(5);
  Gpt model(test::model_settings(40, 10, 2, 2, 16));
  model->to(torch::kDouble);
  model->eval();
  const torch::Tensor input = torch::randint(0, 40, {3, 10}, torch::kLong);
  torch::Tensor target = torch::randint(0, 40, {3, 10}, torch::kLong);
  target.slice(1, 0, 4) = kIgnoreIndex;  // a masked prompt
  const Batch b{input, target, 18};
  const ObjectiveSpec& lm = objective_spec(TrainObjective::kCausalLm);
  CHECK(lm.units(b) == 18);

  namespace F = torch::nn::functional;
  const torch::Tensor logits = model->forward(input);
  const double reference =
      F::cross_entropy(logits.reshape({-1, logits.size(-1)}), target.reshape({-1}),
                       F::CrossEntropyFuncOptions().ignore_index(kIgnoreIndex).reduction(torch::kSum))
          .item<double>();
  CHECK(lm.loss_sum(model, b).item<double>() == Approx(reference).epsilon(1e-10));
  const torch::Tensor stream = model->run_blocks(model->embed(input), 0, model->cfg.n_layer);
  CHECK(lm.stream_loss_sum(model, stream, b).item<double>() == Approx(reference).epsilon(1e-10));
}

TEST_CASE("objectives: one normalization over the step's units, and batches checked for their fields", "[objective]") {
  const ObjectiveSpec& lm = default_objective();
  const torch::Tensor t = torch::zeros({1, 4}, torch::kLong);
  const std::vector<Batch> micro = {Batch{t, t, 3}, Batch{t, t, 5}};
  CHECK(inverse_unit_count(lm, micro, 0) == Approx(1.0 / 8));
  CHECK(inverse_unit_count(lm, micro, 20) == Approx(1.0 / 20));  // the count over every replica
  CHECK(inverse_unit_count(lm, {Batch{t, t, 0}}, 0) == 1.0);     // prompts only: adds nothing
  const std::string message = test::error_message(ErrorKind::kRuntime, [&] {
    check_batch_fields(lm, Batch{t, torch::Tensor(), 0}, "data.train");
  });
  CHECK_THAT(message,
             Contains("train.objective: causal_lm needs targets") && Contains("data.train") && Contains("fix:"));
}
