// The run plan: what a run derives from its recipe and world, kept out of the recipe's Settings,
// and the checks that need the world (config/validate.h).
#include <catch2/catch.hpp>

#include "config/validate.h"
#include "test_util.h"
#include "planning/run_plan.h"
#include "util/error.h"

using namespace gputrain;
using Catch::Matchers::Contains;

namespace {

World world_of(int size, int rank = 0) {
  World w;
  w.size = size, w.rank = rank, w.local_size = size, w.local_rank = rank;
  w.source = "torchrun variables";
  return w;
}

std::string config_error_of(const std::function<void()>& f) { return test::error_message(ErrorKind::kConfig, f); }

}  // namespace

TEST_CASE("run plan: derived values stay out of the recipe, resolved_settings carries them", "[train][plan]") {
  Settings s;
  s.run.device = "cpu";
  s.parallel.dp = 0;                  // auto
  s.train.per_device_batch_size = 0;  // auto
  s.train.global_batch_size = 12;
  RunPlan p = plan_run(s, world_of(3, 2), /*overwrite=*/true);
  CHECK(p.dp == 3);
  CHECK_FALSE(p.lead);
  CHECK(p.device.is_cpu());
  CHECK(p.resume == "never");  // --overwrite over resume: auto
  CHECK_FALSE(p.batch.chosen());
  p.batch.per_device_batch_size = 2, p.batch.grad_accum_steps = 2;
  const Settings r = resolved_settings(s, p);
  CHECK(r.parallel.dp == 3);
  CHECK(r.checkpoint.resume == "never");
  CHECK(r.train.per_device_batch_size == 2);
  CHECK(r.train.grad_accum_steps == 2);
  CHECK(r.train.global_batch_size == 12);
  CHECK(p.sequences_per_rank() == 4);
  CHECK(plan_run(s, world_of(1), /*overwrite=*/false).resume == "auto");
}

TEST_CASE("run plan: the world's checks name the keys and the fix", "[train][plan]") {
  Settings s;
  s.run.device = "cpu";
  s.parallel.dp = 0;
  s.train.per_device_batch_size = 2, s.train.grad_accum_steps = 1, s.train.global_batch_size = 2;
  CHECK_THAT(config_error_of([&] { plan_run(s, world_of(2), false); }),
             Contains("train.global_batch_size (2) is not per_device_batch_size x grad_accum_steps x the 2 processes "
                      "(4)") &&
                 Contains("fix:"));
  CHECK_NOTHROW(plan_run(s, world_of(1), false));

  s.train.per_device_batch_size = 0, s.train.global_batch_size = 5;
  const RunPlan p = plan_run(s, world_of(2), false);
  CHECK_THAT(config_error_of([&] { validate_batch_auto(s, run_world(p)); }),
             Contains("must divide evenly over the 2 data-parallel processes") && Contains("multiple of 2"));
  s.train.global_batch_size = 6;
  CHECK_NOTHROW(validate_batch_auto(s, run_world(p)));
  s.parallel.tp = 2;
  RunWorld gpu = run_world(p);
  gpu.on_gpu = true;
  CHECK_THAT(config_error_of([&] { validate_batch_auto(s, gpu); }), Contains("tries batch sizes on the GPU"));
  // ZeRO-3's trial steps would gather from every rank; on the CPU the memory plan decides.
  s.parallel.tp = 1, s.parallel.zero = 3;
  CHECK_THAT(config_error_of([&] { validate_batch_auto(s, gpu); }),
             Contains("under parallel.zero: 3 each trial gathers weights from every rank") && Contains("fix:"));
  CHECK_NOTHROW(validate_batch_auto(s, run_world(p)));
  gpu.dp = 1;
  CHECK_NOTHROW(validate_batch_auto(s, gpu));

  Settings g;
  g.kernels.cuda_graphs = true;
  CHECK_THAT(config_error_of([&] {
               validate_for_world(g, RunWorld{2, 2, "rank 0 of 2", true, true});
             }),
             Contains("kernels.cuda_graphs captures the step of a single process") && Contains("world of 2"));
  CHECK_NOTHROW(validate_for_world(g, RunWorld{1, 1, "single process", true, false}));
}
