// A model built on the meta device and parallelized: each rank's parameters (tp slices, its stage's,
// its experts, ZeRO-3 rows) hold exactly, bit for bit, the same elements of one process's model built
// whole from the same seed, and no rank was given storage for another's part. Four ranks are threads
// of this process over Gloo on loopback.
#include <catch2/catch.hpp>
#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "checkpoint/model_files.h"
#include "checkpoint/module_weights.h"
#include "checkpoint/stored_weights.h"
#include "model/lora.h"
#include "train/lora_base_fingerprint.h"
#include "model/gpt_shapes.h"
#include "model/meta_build.h"
#include "parallel/fully_sharded.h"
#include "parallel/launcher.h"
#include "parallel/parallelize.h"
#include "parallel/process_groups.h"
#include "parallel/rank_layout.h"
#include "test_util.h"
#include "thread_ranks.h"

using namespace gputrain;

namespace {

constexpr uint64_t kSeed = 1234;
std::mutex seed_lock;  // the global seed is the build's, and the ranks share it

Gpt build(const ModelSettings& m, bool meta) {
  std::lock_guard<std::mutex> lock(seed_lock);
  torch::manual_seed(kSeed);
  if (!meta) return Gpt(m);
  MetaBuild on_meta;
  return Gpt(m);
}

// Of this rank's tensor-parallel part of `whole`, the piece its held tensor `t` should be.
torch::Tensor tp_part(const RankShare& share, const ProcessGroups& groups, const std::string& name,
                      const torch::Tensor& whole) {
  for (const TensorShard& s : share.tensor_split)
    if (s.name == name && s.dim >= 0) return shard_of(whole, s, groups.tp()->rank(), groups.tp()->size());
  return whole;
}

// Checks every parameter of this rank against `reference` (name -> whole tensor); returns how many it holds.
size_t check_rank(const ProcessGroups& groups, const ParallelModel& par, Gpt& model,
                  const std::map<std::string, torch::Tensor>& reference) {
  const RankShare& share = par.share;
  for (const auto& w : share.weights) {
    INFO(w.name);
    REQUIRE(!w.tensor.is_meta());
    const torch::Tensor expected = tp_part(share, groups, w.name, reference.at(w.name));
    if (!share.fully_sharded) {
      CHECK(torch::equal(w.tensor, expected));
      continue;
    }
    const auto piece = share.fully_sharded->own_rows(w.name, w.tensor);
    REQUIRE(piece);
    const int64_t n = piece->rows.size(0);
    CHECK(torch::equal(piece->rows, expected.narrow(0, piece->slice.first, n)));
    CHECK(w.tensor.narrow(0, n, w.tensor.size(0) - n).count_nonzero().item<int64_t>() == 0);  // padding
  }
  // What the rank does not hold has no storage (ZeRO-3's gathered parameters are freed between uses).
  int64_t bytes = 0;
  for (const auto& p : model->parameters()) {
    REQUIRE(!p.is_meta());
    bytes += static_cast<int64_t>(p.storage().nbytes());
  }
  int64_t held_bytes = 0;
  for (const auto& w : share.weights) held_bytes += static_cast<int64_t>(w.tensor.nbytes());
  CHECK(bytes == (share.fully_sharded ? 0 : held_bytes));
  return share.weights.size();
}

// The layout planned from the settings is what parallelize carried out: the same parameters, each the
// shape this rank's tensor (ZeRO-3: its tensor before sharding) has, frozen where it is frozen.
void check_planned(const RankLayout& planned, const ParallelModel& par, Gpt& model) {
  std::vector<std::string> names, carried;
  for (const HeldParameter& h : planned.parameters) names.push_back(h.name);
  for (const auto& w : par.share.weights) carried.push_back(w.name);
  CHECK(names == carried);
  CHECK(planned.stage.first == par.share.stage().first);
  CHECK(planned.stage.last == par.share.stage().last);
  const auto live = model->named_parameters();
  for (const HeldParameter& h : planned.parameters) {
    INFO(h.name);
    const torch::Tensor& t = live[h.name];
    CHECK(h.trainable == t.requires_grad());
    if (par.share.fully_sharded) continue;  // its rows only: checked by check_rank
    CHECK(t.sizes().vec() == h.sizes);
  }
}

// The base weights of `model` (a LoRA model's frozen ones: those model.init_from gives).
std::vector<NamedTensor> base_of(Gpt& model) {
  std::vector<NamedTensor> base;
  for (auto& w : module_weights(*model))
    if (!is_lora_parameter(w.name)) base.push_back(std::move(w));
  return base;
}

// Builds `m` on meta on `world` ranks under `p`, parallelizes (with `init_from`'s weights, each rank
// reading its part), and checks each against one process's whole model (the same weights loaded
// whole). Returns the parameter tensors each rank holds.
std::vector<size_t> check_layout(const ModelSettings& m, ParallelSettings p, int world,
                                 const std::string& init_from = "") {
  std::map<std::string, torch::Tensor> reference;
  Gpt whole = build(m, /*meta=*/false);
  if (!init_from.empty()) load_initial_weights(*whole, m, init_from);
  for (const auto& item : whole->named_parameters()) reference[item.key()] = item.value().detach();
  p.backend = CommBackend::kGloo;
  const int port = free_tcp_port();
  std::vector<size_t> held(static_cast<size_t>(world));
  std::mutex report;
  auto rank_main = [&](int rank) {
    World w;
    w.rank = rank, w.size = w.local_size = world, w.local_rank = rank, w.master_port = port, w.source = "test";
    ProcessGroups groups(w, p, torch::kCPU);
    Gpt model = build(m, /*meta=*/true);
    std::unique_ptr<StoredWeights> files;
    if (!init_from.empty()) files = StoredWeights::init_from(init_from, m, base_of(model));
    ParallelizeOptions plan{p, CheckpointingPolicy::kNone, 2, torch::kCPU, ShardBlocks{}};
    ParallelModel par = parallelize(model, groups, plan, files.get());
    // What the settings alone say this rank holds (the planners' and the checkpoint's view).
    const RankLayout planned = rank_layout(gpt_parameter_shapes(m), m, p, groups.grid(), rank);
    std::lock_guard<std::mutex> lock(report);  // Catch2's assertions are not thread-safe
    INFO("rank " << rank);
    held[static_cast<size_t>(rank)] = check_rank(groups, par, model, reference);
    check_planned(planned, par, model);
  };
  test::run_ranks_as_threads(world, rank_main);
  return held;
}

ModelSettings llama() {
  ModelSettings m = test::model_settings(64, 16, 2, 4, 32);
  m.arch = ModelArch::kLlama;
  m.n_kv_head = 2;
  m.bias = true;
  return m;
}

}  // namespace

TEST_CASE("meta build: each rank's initial weights are one process's, bit for bit, under every layout",
          "[parallel][meta]") {
  at::set_num_threads(1);
  const ModelSettings gpt2 = test::model_settings(64, 16, 2, 4, 32);
  ParallelSettings p;
  SECTION("ZeRO-3 over 4 ranks, tied embeddings") {
    p.zero = 3;
    check_layout(gpt2, p, 4);
  }
  SECTION("ZeRO-3 over dp 2 x tp 2, grouped-query Llama with biases") {
    p.zero = 3, p.tp = 2;
    check_layout(llama(), p, 4);
  }
  SECTION("tp 2 x dp 2 and pp 2 x tp 2 without ZeRO") {
    p.tp = 2;
    check_layout(llama(), p, 4);
    p.pp = 2;
    // Each rank holds its stage's parameters and no other: the embedding and block 0 on the first, block 1,
    // the final norm and the head on the second (a tied embedding on both).
    const ModelSettings m = llama();
    size_t first = 0, second = 0;
    for (const auto& item : build(m, false)->named_parameters()) {
      const std::string& name = item.key();
      const bool embedding = name.find("wte") != std::string::npos || name.find("wpe") != std::string::npos;
      const bool block0 = name.find(".h.0.") != std::string::npos;
      first += embedding || block0;
      second += !(embedding || block0) || (embedding && m.tie_embeddings && name.find("wte") != std::string::npos);
    }
    std::vector<size_t> held = check_layout(m, p, 4);
    std::sort(held.begin(), held.end());
    std::vector<size_t> want = {first, first, second, second};
    std::sort(want.begin(), want.end());
    CHECK(held == want);
    CHECK(first > 0);
    CHECK(second > 0);
  }
  SECTION("ZeRO-3 under a pipeline, dp 2 x pp 2, untied") {
    ModelSettings m = gpt2;
    m.tie_embeddings = false;
    p.zero = 3, p.pp = 2;
    check_layout(m, p, 4);
  }
  SECTION("ZeRO-3 with expert parallelism: 4 experts over ep 2, each expert over its 2 replicas") {
    ModelSettings m = gpt2;
    m.moe.experts = 4;
    p.zero = 3, p.ep = 2;
    const auto held = check_layout(m, p, 4);
    CHECK(held[0] == held[1]);
  }
  SECTION("ZeRO-3 with LoRA adapters on a frozen base") {
    ModelSettings m = gpt2;
    m.lora.rank = 4;
    p.zero = 3;
    check_layout(m, p, 4);
  }
}

TEST_CASE("meta build from files: each rank's part of model.init_from's weights is one process's, bit for bit",
          "[parallel][meta]") {
  at::set_num_threads(1);
  test::TempDir dir;
  // Weights unlike the seed's (another seed, biases and norms random too), in shards of Hugging Face files.
  auto write_random = [&](const ModelSettings& m, torch::ScalarType dtype, const std::string& name) {
    torch::manual_seed(99);
    Gpt source(m);
    torch::NoGradGuard no_grad;
    for (auto& t : source->parameters()) t.normal_(0.0, 0.05);
    test::write_hf_folder(base_of(source), m, dtype, dir.path() / name, 20000);
    return dir.file(name);
  };
  const ModelSettings gpt2 = test::model_settings(64, 16, 2, 4, 32);
  ParallelSettings p;
  SECTION("GPT-2 (transposed Conv1D) under ZeRO-3 over 4 ranks") {
    p.zero = 3;
    check_layout(gpt2, p, 4, write_random(gpt2, torch::kFloat, "gpt2"));
  }
  SECTION("Llama (q, k, v bands) in bf16 under ZeRO-3 over dp 2 x tp 2") {
    p.zero = 3, p.tp = 2;
    check_layout(llama(), p, 4, write_random(llama(), torch::kBFloat16, "llama"));
  }
  SECTION("Llama under pp 2 x tp 2 without ZeRO") {
    p.tp = 2, p.pp = 2;
    check_layout(llama(), p, 4, write_random(llama(), torch::kFloat, "llama"));
  }
  SECTION("LoRA under ZeRO-3: the base from the files, the adapters from the seed") {
    ModelSettings m = gpt2;
    const std::string files = write_random(m, torch::kFloat, "base");
    m.lora.rank = 4;
    p.zero = 3;
    check_layout(m, p, 4, files);
  }
}

TEST_CASE("LoRA base fingerprint: taken by parts over any number of ranks, it is the whole base's",
          "[parallel][meta][lora]") {
  at::set_num_threads(1);
  test::TempDir dir;
  ModelSettings m = test::model_settings(64, 16, 2, 4, 32);
  {
    torch::manual_seed(99);
    Gpt source(m);
    torch::NoGradGuard no_grad;
    for (auto& t : source->parameters()) t.normal_(0.0, 0.05);
    test::write_hf_folder(base_of(source), m, torch::kFloat, dir.path() / "base", 20000);
  }
  m.lora.rank = 4;
  for (const std::string init_from : {std::string(), dir.file("base")}) {
    Gpt whole = build(m, /*meta=*/false);
    if (!init_from.empty()) load_initial_weights(*whole, m, init_from);
    const std::string expected = lora_base_fingerprint(module_weights(*whole));  // what checkpoints record
    for (int world : {1, 3, 4}) {
      INFO((init_from.empty() ? "from the seed" : "from model.init_from") << ", " << world << " ranks");
      std::vector<std::string> got(static_cast<size_t>(world));
      const int port = free_tcp_port();
      test::run_ranks_as_threads(world, [&](int rank) {
        World w;
        w.rank = rank, w.size = w.local_size = world, w.local_rank = rank, w.master_port = port, w.source = "test";
        ParallelSettings p;
        p.backend = CommBackend::kGloo;
        ProcessGroups groups(w, p, torch::kCPU);
        Gpt model = build(m, /*meta=*/true);
        std::unique_ptr<StoredWeights> files;
        if (!init_from.empty()) files = StoredWeights::init_from(init_from, m, base_of(model));
        got[static_cast<size_t>(rank)] =
            lora_base_fingerprint_by_parts(model, InitialParts(model, files.get()), groups.world_comm());
      });
      for (const auto& g : got) CHECK(g == expected);
    }
  }
}
