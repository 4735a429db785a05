// The rank layout's rules on their own (parallel/rank_layout.h): that the ranks of a grid between them
// hold every parameter, slice and token exactly once. That each rank's layout is what parallelize
// carries out on a live model is meta_build_test's.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "model/gpt_shapes.h"
#include "parallel/rank_layout.h"
#include "test_util.h"
#include "util/sequence_chunks.h"

using namespace gputrain;

namespace {

ModelSettings moe_llama() {
  ModelSettings m = test::model_settings(64, 32, 4, 4, 32);
  m.arch = ModelArch::kLlama;
  m.n_kv_head = 2;
  m.moe.experts = 4;
  m.moe.every = 2;
  return m;
}

}  // namespace

TEST_CASE("rank layout: context parallelism's chunks cover each sequence once, with equal causal work", "[parallel]") {
  const int64_t T = 48;
  for (int64_t cp : {1, 2, 3, 4}) {
    CAPTURE(cp);
    REQUIRE(cuts_into_chunks(T, cp));
    std::vector<int> seen(T, 0);
    std::set<int64_t> work;  // each rank's causal attention work: the keys its queries see
    for (int64_t r = 0; r < cp; ++r) {
      const SequenceChunks c = sequence_chunks(T, cp, r);
      CHECK(c.tokens() * cp == T);
      int64_t keys = 0;
      for (int64_t chunk : {c.first, c.second}) {
        if (chunk < 0) continue;
        for (int64_t t = chunk * c.length; t < (chunk + 1) * c.length; ++t)
          ++seen[static_cast<size_t>(t)], keys += t + 1;
      }
      work.insert(keys);
    }
    CHECK(std::count(seen.begin(), seen.end(), 1) == T);
    CHECK(work.size() == 1);
  }
  CHECK_FALSE(cuts_into_chunks(T, 5));  // 48 tokens in 10 chunks
  CHECK_FALSE(cuts_into_chunks(50, 2));
}

TEST_CASE("rank layout: the grid's ranks hold every element of every parameter exactly once per replica",
          "[parallel]") {
  const ModelSettings m = moe_llama();
  ParallelSettings p;
  p.tp = 1, p.pp = 2, p.ep = 2, p.dp = 4, p.cp = 1;
  SECTION("pp 2 x dp 4 with ep 2") {}
  SECTION("pp 2 x tp 2 x dp 2 without experts") { p.tp = 2, p.dp = 2, p.ep = 1; }
  ModelSettings model = m;
  if (p.ep == 1) model.moe.experts = 0;
  const Grid g(p, static_cast<int>(p.dp * p.tp * p.pp));
  const std::vector<ParamShape> shapes = gpt_parameter_shapes(model);
  std::map<std::string, int64_t> whole;
  for (const ParamShape& s : shapes) whole[s.name] = s.numel();
  // Summed over one dp replica's ranks (dp 0 and the ep run beside it), each parameter's elements once;
  // the tied embedding is the pipeline's ends' both.
  std::map<std::string, int64_t> held;
  for (int r = 0; r < g.size(); ++r) {
    const RankLayout l = rank_layout(shapes, model, p, g, r);
    if (l.at.dp >= g.ep()) continue;  // the other runs hold the same
    for (const HeldParameter& h : l.parameters) held[h.name] += h.numel();
  }
  for (const auto& [name, n] : whole) {
    INFO(name);
    const bool tied_twice = name == "transformer.wte.weight" && model.tie_embeddings && p.pp > 1;
    // A dense parameter is held by every rank of the ep run, an expert by one of them; a parameter tp
    // does not split by each tp rank, one it splits in slices that add up to it once.
    const bool split = p.tp > 1 && tensor_split_of(name, model).dim >= 0;
    const int64_t copies = (expert_of(name) >= 0 ? 1 : g.ep()) * (split ? 1 : g.tp()) * (tied_twice ? 2 : 1);
    CHECK(held[name] == n * copies);
  }
}

TEST_CASE("rank layout: ZeRO-1/2 give each trainable parameter one owner among its replicas, in balanced runs",
          "[parallel]") {
  const ModelSettings m = moe_llama();
  ParallelSettings p;
  p.zero = 2, p.dp = 4, p.ep = 2, p.cp = 2;
  const Grid g(p, 8);
  const std::vector<ParamShape> shapes = gpt_parameter_shapes(m);
  std::map<std::string, std::set<int>> owners;  // parameter -> the ranks that update it
  std::map<int, int64_t> dense_owned;           // rank -> dense elements it updates
  int64_t dense_total = 0, largest_dense = 0;
  for (int r = 0; r < g.size(); ++r) {
    const RankLayout l = rank_layout(shapes, m, p, g, r);
    CHECK(l.replicas == 8);
    CHECK(l.expert_replicas == 4);
    for (const HeldParameter& h : l.parameters) {
      if (l.owns(h)) owners[h.name].insert(r), dense_owned[r] += h.expert ? 0 : h.numel();
      if (r == 0 && !h.expert) dense_total += h.numel(), largest_dense = std::max(largest_dense, h.numel());
    }
  }
  for (const ParamShape& s : shapes) {
    INFO(s.name);
    // An expert is held by 4 of the 8 ranks (its replicas) and updated by one of them; a dense one by one of 8.
    CHECK(owners[s.name].size() == 1);
  }
  for (const auto& [rank, n] : dense_owned) {
    INFO("rank " << rank);
    CHECK(std::abs(static_cast<double>(n) - static_cast<double>(dense_total) / 8) <= largest_dense);
  }
}

TEST_CASE("rank layout: tensor parallelism splits q, k and v and SwiGLU's gate and up each on its own", "[parallel]") {
  ModelSettings m = moe_llama();
  m.moe.experts = 0;
  const TensorShard qkv = tensor_split_of("transformer.h.1.attn.c_attn.weight", m);
  CHECK(qkv.dim == 0);
  CHECK(qkv.sections == std::vector<int64_t>{4, 2, 2});
  CHECK(tensor_split_of("transformer.h.0.mlp.c_fc.weight", m).sections == std::vector<int64_t>{1, 1});
  CHECK(tensor_split_of("transformer.h.0.mlp.c_proj.weight", m).dim == 1);
  CHECK(tensor_split_of("transformer.h.0.attn.c_proj.bias", m).dim == -1);  // added after the sum
  CHECK(tensor_split_of("transformer.wte.weight", m).dim == -1);
  m.arch = ModelArch::kGpt;
  CHECK(tensor_split_of("transformer.h.0.mlp.c_fc.bias", m).sections == std::vector<int64_t>{1});
  CHECK(expert_of("transformer.h.3.mlp.experts.12.c_fc.weight") == 12);
  CHECK(expert_of("transformer.h.3.mlp.c_fc.weight") == -1);
}
