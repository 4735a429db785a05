#include "parallel/parallelize.h"

#include "model/activation_checkpointing.h"

namespace gputrain {

ParallelizedModel parallelize(Gpt& model, ParallelRun& par, const TrainSettings& train) {
  par.split_tensors(model);
  par.keep_pipeline_stage(model);
  par.keep_experts(model);
  ParallelizedModel out;
  out.recomputed_blocks = apply_activation_checkpointing(model, train.gradient_checkpointing, train.checkpoint_every);
  out.params = par.held(module_weights(*model));
  par.attach(out.params);
  return out;
}

}  // namespace gputrain
