// The host block cache (util/host_allocator.h) inside a real run: what a rare step held besides what the
// steps need goes back to the OS at the end of the next step, as resident memory read from /proc shows.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include "test_util.h"

using namespace gputrain::test;

TEST_CASE("host cache: resident memory falls back after a rollback's second copy of the state is freed",
          "[cli][memory]") {
  // A spike at step 7 rolls back to step 6's checkpoint: the step reads the whole state (weights, both
  // Adam moments) while the old one is still in use, and frees the old one. Later steps take those
  // blocks now and then (equal sizes rotate in the cache), so "untaken for a whole step" alone never
  // hands them back: measured 584 -> 685 -> 620 MiB without the step's-peak rule, 584 -> 685 -> 587 with it.
  TempDir dir;
  write_file(dir.file("r.yaml"),
             "run: {name: cache, threads: 2}\n"
             "model: {vocab_size: 256, seq_len: 64, n_layer: 4, n_head: 4, d_model: 512}\n"
             "data:\n  train: {format: text, path: " +
                 shared_data("tinyshakespeare.txt") +
                 ", span: [0.0, 0.05]}\n"
                 "train: {per_device_batch_size: 4, max_steps: 8, log_every: 1, spike_policy: rollback, "
                 "spike_window: 3, spike_threshold: 6}\n"
                 "optim: {lr: 1e-3}\n"
                 "checkpoint: {every: 6, at_end: false}\n"
                 "metrics: {progress: off}\n");
  ScopedEnv poison("GPUTRAIN_POISON_STEPS", "7");
  // Three names, each paused once: before the rollback (the save of step 6, after that step's end), after
  // the step that rolled back, and after the next one.
  ArmedFailpoints failpoints("checkpoint.write=pause;train.step_done@7=pause;train.done=pause");
  const int log = ::open(dir.file("log").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  const int pid = spawn_gputrain({"run", dir.file("r.yaml"), "--output-dir", dir.file("out")}, log);
  ::close(log);
  KillOnExit guard({pid});
  std::vector<double> resident;
  for (const char* name : {"checkpoint.write", "train.step_done", "train.done"}) {
    INFO(name << "\n" << read_file(dir.file("log")));
    REQUIRE(failpoints.wait_paused(name, pid) == std::vector<int>{pid});
    resident.push_back(proc_status_mb(std::to_string(pid), "VmRSS"));
    failpoints.release(name);
  }
  REQUIRE(wait_exit_code(pid) == 0);
  const std::string output = read_file(dir.file("log"));
  INFO(output);
  REQUIRE_THAT(output, Catch::Matchers::Contains("rolled back to the checkpoint of step 6"));
  INFO("resident: " << resident[0] << " MiB before the rollback, " << resident[1] << " after its step, " << resident[2]
                    << " after the next");
  CHECK(resident[1] > resident[0] + 40);  // the rollback's transient is there (measured 100 MiB)
  CHECK(resident[2] < resident[0] + 10);  // and gone one step later
}
