// The checks of config/validate.h that need the world a run starts in.
#include <string>

#include "config/validate.h"
#include "util/error.h"

namespace gputrain {

void validate_for_world(const Settings& s, const RunWorld& w) {
  const TrainSettings& t = s.train;
  if (t.per_device_batch_size > 0 && t.global_batch_size > 0 &&
      t.global_batch_size != t.per_device_batch_size * t.grad_accum_steps * w.dp)
    throw config_error("train.global_batch_size (" + std::to_string(t.global_batch_size) +
                       ") is not per_device_batch_size x grad_accum_steps x the " + std::to_string(w.dp) +
                       " processes (" + std::to_string(t.per_device_batch_size * t.grad_accum_steps * w.dp) +
                       ")\n    fix: remove it, or set per_device_batch_size: auto to let the finder choose the split");
  if (s.kernels.cuda_graphs && w.on_gpu && w.process_groups)
    throw config_error("kernels.cuda_graphs captures the step of a single process, and this one runs in a world of " +
                       std::to_string(w.processes) + " (" + w.description +
                       ")\n    fix: set kernels.cuda_graphs: false for multi-process runs");
}

void validate_batch_auto(const Settings& s, const RunWorld& w) {
  // The global batch is split over the ranks first, then into micro-batches.
  if (s.train.global_batch_size % w.dp != 0)
    throw config_error("train.global_batch_size (" + std::to_string(s.train.global_batch_size) +
                       ") must divide evenly over the " + std::to_string(w.dp) +
                       " data-parallel processes\n    fix: make it a multiple of " + std::to_string(w.dp));
  // Trial steps would run collectives that an out-of-memory error on one rank leaves hanging.
  const ParallelSettings& p = s.parallel;
  if (w.on_gpu && (p.tp > 1 || p.pp > 1 || p.ep > 1 || p.cp > 1))
    throw config_error(
        "train.per_device_batch_size: auto tries batch sizes on the GPU, which a tensor-, pipeline-, "
        "expert- or context-parallel run (parallel.tp, pp, ep or cp > 1) cannot do\n    fix: set "
        "train.per_device_batch_size (`gputrain plan` estimates what fits)");
  if (w.on_gpu && p.zero == 3 && w.dp > 1)
    throw config_error(
        "train.per_device_batch_size: auto tries batch sizes on the GPU, and under parallel.zero: 3 each trial "
        "gathers weights from every rank, which an out-of-memory error on one rank leaves waiting\n    fix: set "
        "train.per_device_batch_size (`gputrain plan --world-size N` estimates what fits)");
}

}  // namespace gputrain
