#include "objective/causal_lm.h"

namespace gputrain {

// The loss is summed over the targets that are not kIgnoreIndex: the loader masks chat prompts,
// document boundaries and padding that way (data/loader.h), so the mask is in the batch already.
const ObjectiveSpec& causal_lm_spec() {
  static const ObjectiveSpec spec{
      TrainObjective::kCausalLm,
      "next-token cross-entropy over the targets that take loss (masked ones are kIgnoreIndex), the mean over "
      "the step's targets",
      {BatchField::kInput, BatchField::kTarget},
      1,
      [](const Batch& b) { return b.target_count; },
      [](Gpt& model, const Batch& b) { return model->loss_sum(b.input, b.target, b.token_layout); },
      [](Gpt& model, const torch::Tensor& stream, const Batch& b) {
        return model->head_loss_sum(stream, b.target.to(stream.device()));
      },
  };
  return spec;
}

}  // namespace gputrain
