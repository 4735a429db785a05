// parallel.offload_optimizer nvme on this machine (Gloo, 2 ZeRO-3 processes): the losses of the state
// in memory for AdamW, 8-bit AdamW and Adafactor (and with the fp32 weight shards in the file too, under
// bf16), checkpoints byte for byte, an exact resume, no file
// left behind, and a full disk (a tiny tmpfs) refused before the first step with nothing written.
#include <catch2/catch.hpp>

#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "parallel_runs.h"
#include "same_tensors.h"
#include "test_util.h"

using namespace gputrain::test;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

std::string step(const std::string& out, int n) {
  return out + "/checkpoints/step_000000" + (n < 10 ? "0" : "") + std::to_string(n);
}

}  // namespace

TEST_CASE("parallel: NVMe offload trains as in memory with AdamW, 8-bit AdamW and Adafactor, and resumes exactly",
          "[parallel][cli][slow][nvme]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  const std::vector<std::pair<const char*, std::vector<std::string>>> optimizers = {
      {"adamw", {"optim.name=adamw"}},
      {"8bit", {"optim.name=adamw8bit", "optim.adamw8bit.min_8bit_size=100"}},
      {"adafactor", {"optim.name=adafactor"}},
      // Gathered in bf16: the fp32 weight shards live in the file too, memory keeps their bf16 copies.
      {"adamw-bf16", {"optim.name=adamw", "precision.mode=bf16"}},
  };
  for (const auto& [name, optim] : optimizers) {
    SECTION(name) {
      std::vector<std::string> in_memory = optim;
      in_memory.insert(in_memory.end(), {"parallel.zero=3", "checkpoint.every=10"});
      const std::string memory_out = dir.file(std::string(name) + "-memory");
      const auto m = train(dir.file("r.yaml"), memory_out, 2, in_memory);
      INFO(m.output);
      REQUIRE(m.exit_code == 0);

      const std::string offload_dir = dir.file(std::string(name) + "-state");
      std::vector<std::string> nvme = in_memory;
      nvme.insert(nvme.end(), {"parallel.offload_optimizer=nvme", "parallel.offload_dir=" + offload_dir});
      const std::string out = dir.file(name);
      const auto r = train(dir.file("r.yaml"), out, 2, nvme);
      INFO(r.output);
      REQUIRE(r.exit_code == 0);
      CHECK_THAT(r.output, Contains("streamed through each update a unit at a time (4 units"));
      const bool bf16 = std::string(name) == "adamw-bf16";
      CHECK((r.output.find("and the fp32 weight shards") != std::string::npos) == bf16);
      // What each rank keeps of its weights in memory (summary.json): their bf16 copies under bf16.
      const double kept = read_json(out + "/summary.json")["memory_per_rank"][0]["weights_mb"].get<double>(),
                   whole = read_json(memory_out + "/summary.json")["memory_per_rank"][0]["weights_mb"].get<double>();
      CHECK(kept == Approx(bf16 ? whole / 2 : whole).epsilon(1e-6));
      CHECK(max_abs_diff(column(memory_out, "loss"), column(out, "loss")) <= 1e-6);
      CHECK(max_abs_diff(column(memory_out, "grad_norm"), column(out, "grad_norm")) <= 1e-6);
      CHECK(fs::is_empty(offload_dir));  // the state's file is gone with the run
      // Its checkpoints are the in-memory run's (the state read back through the file's views).
      check_same_state_files(step(memory_out, 20), step(out, 20));

      // Resumed at step 10 it ends where the uninterrupted run did, byte for byte.
      const std::string resumed = dir.file(std::string(name) + "-resumed");
      const auto again = train(dir.file("r.yaml"), resumed, 2, with_resume(nvme, step(out, 10)));
      INFO(again.output);
      REQUIRE(again.exit_code == 0);
      check_continues(column(out, "loss"), column(resumed, "loss"), 10, 0);
      check_same_state_files(step(out, 20), step(resumed, 20));
      CHECK(fs::is_empty(offload_dir));
    }
  }
}

TEST_CASE(
    "parallel: NVMe offload keeps the optimizer state out of each rank's resident memory, as the kernel counts it",
    "[parallel][cli][slow][nvme][memory]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  // 37.8M parameters in 12 blocks on 2 ZeRO-3 ranks: each holds AdamW's two fp32 moments of its half,
  // about 144 MiB, which the NVMe run keeps in the file, streaming a unit (a block, ~12 MiB) at a time.
  // The default host allocator never holds more than was in use at once, so each peak is that. No
  // final save: it reads the filed state through the file's mapping, whose pages (reclaimable page
  // cache) the kernel counts in the peak too.
  const std::vector<std::string> memory = {"model.n_layer=12",
                                           "model.d_model=512",
                                           "model.n_head=8",
                                           "train.max_steps=2",
                                           "train.per_device_batch_size=1",
                                           "run.threads=1",
                                           "optim.name=adamw",
                                           "parallel.zero=3",
                                           "checkpoint.at_end=false"};
  const std::vector<std::string> nvme =
      with(memory, {"parallel.offload_optimizer=nvme", "parallel.offload_dir=" + dir.file("state")});
  fs::create_directories(dir.file("state"));
  const auto in_memory = training_peak_mb(dir, "memory", 2, memory), streamed = training_peak_mb(dir, "nvme", 2, nvme);
  const double parameters = read_json(dir.file("memory") + "/summary.json")["parameters"].get<double>();
  const double state_mb = parameters * 8 / 2 / 1048576;  // a rank's half of the two moments
  REQUIRE(state_mb > 140);
  for (size_t r = 0; r < in_memory.size(); ++r) {
    // Lower by the state less the two or three units' buffers the stream holds at once (about 12 MiB each):
    // measured 0.99-1.02 of the state (2026-12-02; 0.77-0.79 with glibc's allocator). A stream that kept
    // every unit's buffers to the step's end measured 0.30-0.35 and failed.
    std::cout << "rank " << r << ": peak " << in_memory[r] << " MiB in memory, " << streamed[r]
              << " MiB with the state in the file: lower by " << (in_memory[r] - streamed[r]) / state_mb << " of the "
              << state_mb << " MiB of state" << std::endl;
    CHECK(in_memory[r] - streamed[r] > 0.6 * state_mb);
  }
}

TEST_CASE("parallel: NVMe offload on a full disk stops before the first step, naming the directory and the fix",
          "[parallel][cli][nvme]") {
  TempDir dir;
  write_file(dir.file("r.yaml"), dp_recipe());
  const std::string small = dir.file("small"), out = dir.file("out");
  fs::create_directories(small);
  // A 16 KiB tmpfs in a mount namespace of the run's own: no privileges needed where user namespaces are allowed.
  const auto r = run_shell("export GPUTRAIN; unshare -rm sh -c 'mount -t tmpfs -o size=16k gputrain-test " + small +
                           " && exec \"$GPUTRAIN\" run " + dir.file("r.yaml") + " --output-dir " + out +
                           " --nproc-per-node 2 --set parallel.zero=3 --set parallel.offload_optimizer=nvme"
                           " --set parallel.offload_dir=" +
                           small + "' 2>&1");
  INFO(r.output);
  if (r.output.find("unshare:") != std::string::npos || r.output.find("mount:") != std::string::npos) {
    mark_skipped("no mount namespace here (unshare or mount refused): the full-disk case cannot run");
    return;
  }
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.output, Contains("parallel.offload_dir '" + small + "': cannot reserve the optimizer state's file"));
  CHECK_THAT(r.output, Contains("No space left on device"));
  CHECK_THAT(r.output, Contains("fix: point it at a local disk with room"));
  CHECK((!fs::exists(out + "/metrics.jsonl") || column(out, "loss").empty()));  // not a step was taken
  CHECK(!fs::exists(out + "/checkpoints/step_00000001"));
}
