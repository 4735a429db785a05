// The step counts an objective's units apart from its target tokens (train/forward_backward.h): the
// loss is normalized by the units, the run's tokens and tokens/s count the targets. An objective
// whose unit is a sequence (as preference objectives' pairs are) shows the two apart.
#include <catch2/catch.hpp>

#include "objective/objectives.h"
#include "parallel/process_groups.h"
#include "precision/precision.h"
#include "test_util.h"
#include "train/forward_backward.h"
#include "util/ignore_index.h"

using namespace gputrain;

namespace {

// Each row's summed loss, one unit per row that has targets.
ObjectiveSpec per_row_objective() {
  ObjectiveSpec spec = default_objective();
  spec.units = [](const Batch& b) { return b.target.ne(kIgnoreIndex).any(1).sum().item<int64_t>(); };
  return spec;
}

}  // namespace

TEST_CASE("forward-backward: the objective's units normalize the loss and the targets are counted apart",
          "[train][objective]") {
  torch::manual_seed(11);
  Gpt model(test::model_settings(30, 8, 1, 2, 16));
  model->to(torch::kDouble);
  const torch::Tensor input = torch::randint(0, 30, {3, 8}, torch::kLong);
  torch::Tensor target = torch::randint(0, 30, {3, 8}, torch::kLong);
  target.slice(1, 0, 5) = kIgnoreIndex;  // prompts masked: 3 targets a row
  target[2] = kIgnoreIndex;              // a row with none
  const Batch b{input, target, 6};
  ProcessGroups groups(World{}, ParallelSettings{}, torch::kCPU);
  const Precision fp64(PrecisionSettings{}, torch::kCPU);
  const ObjectiveSpec rows = per_row_objective();
  ForwardBackward passes(groups, nullptr, nullptr, model, fp64, rows, nullptr);

  const ForwardBackward::Counts n = passes.counts({b, b});
  CHECK(n.units == 4);  // two rows with targets in each micro-batch
  CHECK(n.targets == 12);
  const double loss = passes.step({b, b}, n.units).item<double>();
  CHECK(loss == Approx(2 * model->loss_sum(input, target).item<double>() / 4).epsilon(1e-12));
}
