// Checkpoint directories: committed atomically with a manifest of sizes and
// CRC-32C; unfinished, truncated or corrupt ones are detected and named;
// leftovers of killed writers are ignored, then cleaned (a live writer's never);
// pruning keeps the newest.
#include <catch2/catch.hpp>
#include <ATen/ATen.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include "checkpoint/checkpoint_dir.h"
#include "test_util.h"
#include "util/crc32c.h"
#include "util/process_info.h"

using namespace gputrain;
using namespace gputrain::test;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

fs::path save(const fs::path& root, int64_t step, float value) {
  CheckpointWriter w(root, step);
  w.add_safetensors("model.safetensors", {{"w", at::full({64, 64}, value)}});
  w.add_json("state.json", {{"step", step}});
  return w.commit();
}

}  // namespace

TEST_CASE("CRC-32C matches the standard check value", "[checkpoint]") {
  TempDir dir;
  write_file(dir.file("x"), "123456789");
  CHECK(file_crc32c(dir.file("x")) == 0xe3069283u);
}

TEST_CASE("CRC-32C's fast path equals the table loop at every alignment and split", "[checkpoint]") {
  std::mt19937 rng(7);
  std::vector<uint8_t> bytes(4099);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  for (size_t offset : {0, 1, 3, 7, 8}) {
    for (size_t split : {0, 1, 5, 9, 1000}) {
      const size_t n = bytes.size() - offset;
      Crc32c fast;
      fast.update(bytes.data() + offset, split);
      fast.update(bytes.data() + offset + split, n - split);
      const uint32_t reference = ~crc32c_update_bytewise(0xffffffffu, bytes.data() + offset, n);
      CHECK(fast.value() == reference);
    }
  }
}

TEST_CASE("CRC-32C of pieces taken apart combines into the whole's", "[checkpoint]") {
  std::mt19937 rng(11);
  std::vector<uint8_t> bytes(5000);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  auto crc_of = [&](size_t from, size_t n) {
    Crc32c c;
    c.update(bytes.data() + from, n);
    return c.value();
  };
  for (size_t split : {0, 1, 7, 64, 2500, 4999, 5000}) {
    INFO("split " << split);
    CHECK(crc32c_combine(crc_of(0, split), crc_of(split, bytes.size() - split), bytes.size() - split) ==
          crc_of(0, bytes.size()));
  }
  // Three pieces, joined left to right (as ranks' rows are); the empty prefix's CRC is 0.
  uint32_t joined = 0;
  for (auto [from, n] : {std::pair<size_t, size_t>{0, 1234}, {1234, 3000}, {4234, 766}})
    joined = crc32c_combine(joined, crc_of(from, n), n);
  CHECK(joined == crc_of(0, bytes.size()));
}

TEST_CASE("checkpoint: a committed directory verifies and holds what was added", "[checkpoint]") {
  TempDir dir;
  const fs::path p = save(dir.path() / "ckpt", 100, 1.5f);
  CHECK(p.filename() == "step_00000100");
  CHECK_FALSE(checkpoint_problem(p).has_value());
  CHECK(torch::equal(*read_safetensors((p / "model.safetensors").string()).find("w"), at::full({64, 64}, 1.5f)));
  CHECK(read_json((p / "state.json").string())["step"] == 100);
  auto manifest = read_json((p / "manifest.json").string());
  CHECK(manifest["files"]["model.safetensors"]["bytes"].get<uint64_t>() == fs::file_size(p / "model.safetensors"));
  // The checksums taken while writing are those of the bytes on disk.
  for (const char* f : {"model.safetensors", "state.json"})
    CHECK(manifest["files"][f]["crc32c"].get<uint32_t>() == file_crc32c(p / f));
  // Only the checkpoint is left: no temporary directories.
  CHECK(std::distance(fs::directory_iterator(dir.path() / "ckpt"), fs::directory_iterator()) == 1);
  // Saving the same step again replaces it whole.
  save(dir.path() / "ckpt", 100, 2.5f);
  CHECK(torch::equal(*read_safetensors((p / "model.safetensors").string()).find("w"), at::full({64, 64}, 2.5f)));
  CHECK_FALSE(checkpoint_problem(p).has_value());
  CHECK(std::distance(fs::directory_iterator(dir.path() / "ckpt"), fs::directory_iterator()) == 1);
}

TEST_CASE("checkpoint: unfinished, truncated and corrupt checkpoints are named, good ones untouched", "[checkpoint]") {
  TempDir dir;
  const fs::path root = dir.path() / "ckpt";
  save(root, 1, 1.0f);
  const fs::path two = save(root, 2, 2.0f);
  const fs::path three = save(root, 3, 3.0f);
  {
    // A writer that never commits (its process killed: no destructor runs) leaves only a hidden directory.
    auto* leaked = new CheckpointWriter(root, 4);
    leaked->add_safetensors("model.safetensors", {{"w", at::ones({8})}});
    (void)leaked;  // deliberately never destroyed, as after SIGKILL
  }
  fs::resize_file(two / "model.safetensors", fs::file_size(two / "model.safetensors") - 100);
  {
    std::fstream f(three / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-10, std::ios::end);
    f.put('\x7f');
  }
  fs::create_directories(root / "step_00000005");  // a directory without a manifest
  // The cheap listing sees what a killed save leaves; only checksums see the flipped byte.
  CHECK(list_checkpoints(root).broken.size() == 2);
  const CheckpointListing l = list_checkpoints(root, CheckpointCheck::kChecksums);
  REQUIRE(l.complete.size() == 1);
  CHECK(l.complete[0].filename() == "step_00000001");
  REQUIRE(l.broken.size() == 3);
  CHECK_THAT(l.broken[0].second, Contains("model.safetensors has") && Contains("the manifest says"));
  CHECK_THAT(l.broken[1].second, Contains("model.safetensors fails its checksum"));
  CHECK_THAT(l.broken[2].second, Contains("no manifest.json"));
  // The next writer clears the killed one's leftovers.
  bool leftover = false;
  for (const auto& e : fs::directory_iterator(root)) leftover |= e.path().filename().string().rfind(".tmp-", 0) == 0;
  CHECK(leftover);
  save(root, 6, 6.0f);
  leftover = false;
  for (const auto& e : fs::directory_iterator(root)) leftover |= e.path().filename().string().rfind(".tmp-", 0) == 0;
  CHECK_FALSE(leftover);
}

TEST_CASE("checkpoint: pruning keeps the newest complete checkpoints", "[checkpoint]") {
  TempDir dir;
  const fs::path root = dir.path() / "ckpt";
  for (int64_t s : {10, 20, 30, 40}) save(root, s, static_cast<float>(s));
  prune_checkpoints(root, 2);
  const CheckpointListing l = list_checkpoints(root);
  REQUIRE(l.complete.size() == 2);
  CHECK(l.complete[0].filename() == "step_00000030");
  CHECK(l.complete[1].filename() == "step_00000040");
  CHECK(std::distance(fs::directory_iterator(root), fs::directory_iterator()) == 2);  // nothing left behind
  prune_checkpoints(root, 0);                                                         // 0 keeps all
  CHECK(list_checkpoints(root).complete.size() == 2);
}

TEST_CASE("checkpoint: only temporary directories whose writer is gone are cleared, never a live writer's",
          "[checkpoint]") {
  TempDir dir;
  const fs::path root = dir.path() / "ckpt";
  const std::string here = host_name();
  // A pid that ran here and has exited (reaped), and one that runs (the process that started this test).
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  REQUIRE(::waitpid(dead, nullptr, 0) == dead);
  REQUIRE_FALSE(process_running(dead));
  const std::string live = std::to_string(::getppid());
  const std::map<std::string, bool> cleared_when_local = {
      {".tmp-step_00000005-" + here + "-" + std::to_string(dead), true},  // killed writer of this host
      {".tmp-step_00000005-" + here + "-" + std::to_string(dead) + "-replaced", true},
      {".tmp-step_00000004-" + here + "-" + std::to_string(dead) + "-pruned", true},
      {".tmp-step_00000006-" + here + "-" + std::to_string(::getpid()), true},  // this process's own leftover
      {".tmp-step_00000007-" + std::to_string(dead), true},                     // an earlier version's name
      {".tmp-step_00000003-pruned", true},                                      // an earlier version's prune
      {".tmp-step_00000008-" + here + "-" + live, false},                       // a live writer here
      {".tmp-step_00000008-" + here + "-" + live + "-replaced", false},
      {".tmp-step_00000009-node-a-12-" + std::to_string(dead), false},  // another host's (a '-' in its name)
      {"step_00000002", false},                                         // not temporary at all
  };
  for (const auto& [name, _] : cleared_when_local) fs::create_directories(root / name / "x");
  auto present = [&] {
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(root)) names.insert(e.path().filename().string());
    return names;
  };
  clear_abandoned_saves(root, /*other_hosts=*/false);
  std::set<std::string> expected;
  for (const auto& [name, cleared] : cleared_when_local)
    if (!cleared) expected.insert(name);
  CHECK(present() == expected);
  // Under the directory's lock no other host can be writing: its leftovers go too, the live local one stays.
  clear_abandoned_saves(root, /*other_hosts=*/true);
  expected.erase(".tmp-step_00000009-node-a-12-" + std::to_string(dead));
  CHECK(present() == expected);
  // A writer's own temporary name carries this host and its pid.
  CheckpointWriter w(root, 10);
  CHECK(fs::exists(root / (".tmp-step_00000010-" + here + "-" + std::to_string(::getpid()))));
  CHECK(present().count(".tmp-step_00000008-" + here + "-" + live));  // constructing it cleared nothing live
}

TEST_CASE("checkpoint: ranks of one save each write their files, and the lead commits them under one manifest",
          "[checkpoint]") {
  TempDir dir;
  const fs::path root = dir.file("ckpt");
  save(root, 1, 1.0f);
  const std::string lead = this_writer_id();
  // Rank 1 may come first: the lead's later start must not clear what it wrote.
  CheckpointWriter part(root, 2, CheckpointJoin{lead, 1, 2});
  part.add_safetensors("model.rank1.safetensors", {{"w", at::full({4, 4}, 2.0f)}});
  CheckpointWriter w(root, 2, CheckpointJoin{lead, 0, 2});
  w.add_safetensors("model.rank0.safetensors", {{"w", at::full({4, 4}, 1.0f)}});
  part.commit();
  const fs::path done = w.commit();
  CHECK(done == root / "step_00000002");
  CHECK_FALSE(checkpoint_problem(done));
  const auto files = read_json((done / "manifest.json").string())["files"];
  CHECK(files.size() == 2);
  CHECK(files.contains("model.rank0.safetensors"));
  CHECK(files.contains("model.rank1.safetensors"));
  for (const auto& e : fs::directory_iterator(done))  // the ranks' records are gone
    CHECK(e.path().filename().string().rfind(".part-", 0) != 0);
}

TEST_CASE("checkpoint: a save whose rank never writes its part ends with an error naming it, the last one untouched",
          "[checkpoint]") {
  TempDir dir;
  const fs::path root = dir.file("ckpt");
  const fs::path one = save(root, 1, 1.0f);
  {
    CheckpointWriter w(root, 2, CheckpointJoin{this_writer_id(), 0, 3, 0.2});
    w.add_safetensors("model.rank0.safetensors", {{"w", at::full({4, 4}, 1.0f)}});
    CHECK_THROWS_WITH(w.commit(),
                      Contains("rank 1's files did not appear") && Contains("checkpoint.dir on a filesystem"));
  }
  std::atomic<bool> cancelled{true};  // a failing run stops waiting at once
  {
    CheckpointWriter w(root, 2, CheckpointJoin{this_writer_id(), 0, 3, 600, &cancelled});
    CHECK_THROWS_WITH(w.commit(), Contains("abandoned"));
  }
  const CheckpointListing l = list_checkpoints(root, CheckpointCheck::kChecksums);
  REQUIRE(l.complete.size() == 1);
  CHECK(l.complete[0] == one);
  CHECK(l.broken.empty());
  for (const auto& e : fs::directory_iterator(root)) CHECK(e.path().filename() == "step_00000001");
}
