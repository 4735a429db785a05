#include "parallel/parallelize.h"

#include "model/activation_checkpointing.h"

namespace gputrain {

ParallelizedModel parallelize(Gpt& model, ParallelRun& par, const TrainSettings& train) {
  par.split_tensors(model);
  par.keep_pipeline_stage(model);
  par.keep_experts(model);
  ParallelizedModel out;
  out.recomputed_blocks = apply_activation_checkpointing(model, train.gradient_checkpointing, train.checkpoint_every);
  par.attach(model, par.held(module_weights(*model)));
  out.params = par.weights();  // ZeRO-3: the shards
  return out;
}

}  // namespace gputrain
